// Decode attention over a paged KV cache: one new query token per sequence, for a batch of
// sequences, each attending over its own list of KV pages (ragged per sequence and per layer).
//
// The op knows only raw spans, not the KV pool (engine/kv builds the spans from its page tables):
// a KvSpan is `num_tokens` consecutive token slots of one page in that span's own format, so one
// call reads f32, f16, int4 and int2 pages mixed (each sequence's spans in any order):
//   f32/f16:   K and V each [slot, G, d] (token-major) elements.
//   int4/int2: K and V each [slot] rows of packed codes (ops/kv_quant.h: CodeRowBytes(G·d, bits)
//              bytes, blocks of 32 channels), plus f16 scale/zero: keys per channel
//              (k_scale/k_zero [G, d]), values per token and 32-channel group
//              (v_scale/v_zero [G·d/32, v_param_stride], group-major). Needs d % 32 == 0, and
//              v_param_stride >= num_tokens rounded up to 8 (the AVX2 path loads the parameters
//              of eight slots at once; slots past num_tokens are read, and weighted by zero).
// Keys are post-RoPE, so attention is order-free over spans and needs no positions.
//
// CPU kernel: split over (sequence, KV head) on ComputePool(); the H/G query heads that share a KV
// head are processed together so each key/value row is loaded (and dequantised, into a small
// tile of rows in L1) once; online softmax over spans. AVX2+FMA+F16C when the CPU has them.
//
// Shapes: q [B, H, d] f32; out [B, H, d] f32 (must not alias q).
// Sequence b attends over spans[span_offsets[b] .. span_offsets[b + 1]); span_offsets has B + 1
// entries, starts at 0 and is non-decreasing. A sequence with no tokens gets a zero output.
// Errors: INVALID_ARGUMENT naming the mismatch (a malformed span, d % 32 != 0 with a quantised
// span); UNIMPLEMENTED for other formats (low-rank).
// CUDA: q and out on the GPU and every span pointer a device pointer, pages 16-byte aligned;
// head_dim 64 or 128 (else UNIMPLEMENTED). Split-K kernel: engine/kernels/cuda/paged_attention.cuh.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/half.h"
#include "engine/core/tensor.h"
#include "engine/kv/kv_format.h"  // the KvFormat tag only (header-level, no link dependency)

namespace framezip::engine::ops {

struct KvSpan {
  const void* k = nullptr;  // dense: [num_tokens, G, d] elements; quantised: packed code rows
  const void* v = nullptr;  // same for values
  int32_t num_tokens = 0;
  kv::KvFormat format = kv::KvFormat::kF32;
  // Quantised formats only.
  const Float16* k_scale = nullptr;  // [G, d]
  const Float16* k_zero = nullptr;   // [G, d]
  const Float16* v_scale = nullptr;  // [G·d/32, v_param_stride]
  const Float16* v_zero = nullptr;   // [G·d/32, v_param_stride]
  int32_t v_param_stride = 0;        // slots per group row of v_scale/v_zero (the page size)
};

struct PagedDecodeParams {
  int num_kv_heads = 0;  // G
  float scale = 0;       // 0 means 1/sqrt(d)
};

Status PagedDecodeAttention(const Tensor& q, std::span<const KvSpan> spans,
                            std::span<const int32_t> span_offsets, const PagedDecodeParams& params,
                            Tensor& out);

// Whether decode attention over paged KV is built for `head_dim` on `device`: OK, or UNIMPLEMENTED
// naming the head size and what the device takes. CPU: any head_dim (quantised pages also need
// head_dim % 32 == 0, which their pools check). CUDA: 64 or 128. A decoder asks at construction,
// so a model the device cannot serve fails at load, not at its first decode step.
Status PagedDecodeSupports(Device device, int64_t head_dim);

}  // namespace framezip::engine::ops
