// PagedKv: a batch's KV cache as the attention ops read it — our counterpart of FlashInfer's
// paged_kv_t. The ops know no pool and no page table (engine/kv builds this from its pages); they
// get, per sequence, a list of spans, each `num_tokens` consecutive slots of one page in that
// span's own format, so one call reads f32, f16, int4 and int2 pages mixed:
//   f32/f16:   K and V each [slot, G, d] (token-major) elements.
//   int4/int2: K and V each [slot] rows of packed codes (ops/kv_quant.h: CodeRowBytes(G·d, bits)
//              bytes, blocks of 32 channels), plus f16 scale/zero: keys per channel
//              (k_scale/k_zero [G, d]), values per token and 32-channel group
//              (v_scale/v_zero [G·d/32, v_param_stride], group-major). Needs d % 32 == 0, and
//              v_param_stride >= num_tokens rounded up to 8 (the AVX2 decode path loads the
//              parameters of eight slots at once; slots past num_tokens are read, and weighted by
//              zero).
// Sequence b's tokens are spans[seq_offsets[b] .. seq_offsets[b + 1]) in that order. Keys are
// post-RoPE, so decode attention is order-free over spans; a prefill's causal and windowed
// attention reads them as the sequence's earlier positions in span order.
// Every pointer addresses memory on the device of the op that reads it (device pointers for a GPU
// op), the pages 16-byte aligned there.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"
#include "engine/core/device.h"
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

struct PagedKv {
  std::span<const KvSpan> spans;
  std::span<const int32_t> seq_offsets;  // batch() + 1 entries, from 0, non-decreasing
  int num_kv_heads = 0;                  // G
  int head_dim = 0;                      // d

  int64_t batch() const {
    return seq_offsets.empty() ? 0 : static_cast<int64_t>(seq_offsets.size()) - 1;
  }
  std::span<const KvSpan> spans_of(int64_t b) const {
    return spans.subspan(static_cast<size_t>(seq_offsets[static_cast<size_t>(b)]),
                         static_cast<size_t>(seq_offsets[static_cast<size_t>(b) + 1] -
                                             seq_offsets[static_cast<size_t>(b)]));
  }
  // Tokens of sequence b: the sum of its spans' num_tokens.
  int64_t tokens(int64_t b) const;
};

// INVALID_ARGUMENT, naming `op` and the fault, unless `kv` is well formed for `batch` sequences
// (its offsets, its spans' pointers, a quantised span's scales and parameter stride, d % 32 for
// quantised spans); UNIMPLEMENTED for a span in a format no op reads as pages (low-rank).
Status CheckPagedKv(std::string_view op, const PagedKv& kv, int64_t batch);

// Sequence b's tokens as dense f32 K and V, each [kv.tokens(b), G, d], in span order, written to
// k and v on `device` (either may be null: that half is not read). Each span is converted from its
// format: f32 copied, f16 widened, int4/int2 dequantised (ops/kv_quant.h's maps; on a GPU in one
// kernel per 40 spans, engine/kernels/cuda/gather_spans.cuh, nothing through the host). This is
// how a prefill op over a compressed past reads it, and how engine/kv reads pages back.
// INVALID_ARGUMENT for b out of range or a layout CheckPagedKv refuses.
Status GatherPagedKv(const PagedKv& kv, int64_t b, Device device, float* k, float* v);

// The same into new tensors k, v [tokens, G, d] f32 on `device`.
struct GatheredKv {
  Tensor k, v;
  int64_t tokens = 0;
};
StatusOr<GatheredKv> GatherPagedKv(const PagedKv& kv, int64_t b, Device device);

// For the prefill ops (attention_local.h, attention_sparse.h), whose `past` is one sequence's
// earlier tokens (batch 1) or nothing (batch 0): INVALID_ARGUMENT naming `op` unless it is well
// formed and has `kv_heads` × `head_dim` (the chunk's keys' shape).
Status CheckPastKv(std::string_view op, const PagedKv& past, int64_t kv_heads, int64_t head_dim);

}  // namespace framezip::engine::ops
