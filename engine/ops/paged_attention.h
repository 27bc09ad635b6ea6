// Decode attention over a paged KV cache: one new query token per sequence, for a batch of
// sequences, each attending over its own list of KV pages (ragged per sequence and per layer).
//
// The op knows only raw spans, not the KV pool (engine/kv builds the spans from its page tables):
// a KvSpan is `num_tokens` consecutive token slots of one page, K and V each laid out
// [slot, G, d] (token-major) in `kv_dtype` (f32 or f16 now; quantised formats add fields later).
// Keys are post-RoPE, so attention is order-free over spans and needs no positions.
//
// CPU kernel: split over (sequence, KV head) on ComputePool(); the H/G query heads that share a KV
// head are processed together so each key/value row is loaded once; online softmax over spans.
//
// Shapes: q [B, H, d] f32; out [B, H, d] f32 (must not alias q).
// Sequence b attends over spans[span_offsets[b] .. span_offsets[b + 1]); span_offsets has B + 1
// entries, starts at 0 and is non-decreasing. A sequence with no tokens gets a zero output.
// Errors: INVALID_ARGUMENT naming the mismatch; UNIMPLEMENTED for CUDA tensors or other formats.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

struct KvSpan {
  const void* k = nullptr;  // [num_tokens, G, d] of kv_dtype
  const void* v = nullptr;  // [num_tokens, G, d] of kv_dtype
  int32_t num_tokens = 0;
};

struct PagedDecodeParams {
  DType kv_dtype = DType::kF32;  // kF32 or kF16
  int num_kv_heads = 0;          // G
  float scale = 0;               // 0 means 1/sqrt(d)
};

Status PagedDecodeAttention(const Tensor& q, std::span<const KvSpan> spans,
                            std::span<const int32_t> span_offsets, const PagedDecodeParams& params,
                            Tensor& out);

}  // namespace framezip::engine::ops
