// Decode attention over a paged KV cache: one new query token per sequence, for a batch of
// sequences, each attending over its own list of KV pages (ragged per sequence and per layer).
//
// The op knows no pool: it reads the pages through ops::PagedKv (paged_kv.h), our paged_kv_t, so
// one call reads f32, f16, int4 and int2 pages mixed (each sequence's spans in any order: keys are
// post-RoPE, so attention is order-free over spans and needs no positions).
//
// CPU kernel: split over (sequence, KV head) on ComputePool(); the H/G query heads that share a KV
// head are processed together so each key/value row is loaded (and dequantised, into a small
// tile of rows in L1) once; online softmax over spans. AVX2+FMA+F16C when the CPU has them.
//
// Shapes: q [B, H, d] f32 with d = kv.head_dim and H % kv.num_kv_heads == 0; out [B, H, d] f32
// (must not alias q). Sequence b attends over kv's sequence b. A sequence with no tokens gets a
// zero output. `scale` 0 means 1/sqrt(d).
// lse: null, or f32 [B, H] on q's device receiving each row's log-sum-exp of its scaled scores,
// ln Σ_t e^(scale·q·k_t) (-inf for a sequence with no tokens): with it the normalised output is
// one share of a larger softmax that other parts (AttentionPack's low-rank blocks) merge with
// (ops/attention_merge.h).
// Errors: INVALID_ARGUMENT naming the mismatch (CheckPagedKv's, or a shape); UNIMPLEMENTED for a
// span format no kernel reads (low-rank).
// CUDA: q and out on the GPU and every span pointer a device pointer, pages 16-byte aligned;
// head_dim 32, 64 or 128 (else UNIMPLEMENTED). Split-K kernel:
// engine/kernels/cuda/paged_attention.cuh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/paged_kv.h"

namespace framezip::engine::ops {

Status PagedDecodeAttention(const Tensor& q, const PagedKv& kv, Tensor& out, float scale = 0,
                            Tensor* lse = nullptr);

// Whether decode attention over paged KV is built for `head_dim` on `device`: OK, or UNIMPLEMENTED
// naming the head size and what the device takes. CPU: any head_dim (quantised pages also need
// head_dim % 32 == 0, which their pools check). CUDA: 32, 64 or 128. A decoder asks at construction,
// so a model the device cannot serve fails at load, not at its first decode step.
Status PagedDecodeSupports(Device device, int64_t head_dim);

// The same attention prepared ahead, for a step plan (engine/llm/step_plan.h): every layer's
// descriptors are serialised into one host arena when the step is planned, the arena reaches the
// device in the step's one upload, and each layer's launch reads its part there, so no layer
// copies anything. The CPU serialises the spans and offsets themselves; a GPU its kernel's span
// descriptors and split-K work items.
struct PagedDecodePlan {
  size_t offset = 0;            // where this layer's descriptors start in the arena
  int64_t batch = 0;            // sequences (q's rows)
  int64_t heads = 0;            // query heads the work was split for
  int32_t num_spans = 0;
  int32_t num_items = 0;        // GPU: split-K work items
  size_t workspace_floats = 0;  // GPU: partial results the launch needs
  int num_kv_heads = 0;
  int head_dim = 0;
};

// Appends kv's descriptors for attention on `device` by a query of `heads` heads to `arena`
// (aligned to 256 bytes). The checks of PagedDecodeAttention (CheckPagedKv, the GPU's alignment
// and head sizes) run here, so a plan that is built can be run.
StatusOr<PagedDecodePlan> PlanPagedDecode(Device device, const PagedKv& kv, int64_t heads,
                                          std::vector<std::byte>& arena);

// Runs a planned attention: q, out [plan.batch, plan.heads, d] on the device; `arena` the device
// copy of the arena the plan was built in; `workspace` at least plan.workspace_floats floats of
// device memory (may be null when that is 0, always on the CPU); `lse` as PagedDecodeAttention's.
Status PagedDecodeAttentionPlanned(const Tensor& q, const PagedDecodePlan& plan,
                                   const std::byte* arena, float* workspace, Tensor& out,
                                   float scale = 0, Tensor* lse = nullptr);

}  // namespace framezip::engine::ops
