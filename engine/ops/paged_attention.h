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
// Errors: INVALID_ARGUMENT naming the mismatch (CheckPagedKv's, or a shape); UNIMPLEMENTED for a
// span format no kernel reads (low-rank).
// CUDA: q and out on the GPU and every span pointer a device pointer, pages 16-byte aligned;
// head_dim 32, 64 or 128 (else UNIMPLEMENTED). Split-K kernel: engine/kernels/cuda/paged_attention.cuh.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/paged_kv.h"

namespace framezip::engine::ops {

Status PagedDecodeAttention(const Tensor& q, const PagedKv& kv, Tensor& out, float scale = 0);

// Whether decode attention over paged KV is built for `head_dim` on `device`: OK, or UNIMPLEMENTED
// naming the head size and what the device takes. CPU: any head_dim (quantised pages also need
// head_dim % 32 == 0, which their pools check). CUDA: 32, 64 or 128. A decoder asks at construction,
// so a model the device cannot serve fails at load, not at its first decode step.
Status PagedDecodeSupports(Device device, int64_t head_dim);

}  // namespace framezip::engine::ops
