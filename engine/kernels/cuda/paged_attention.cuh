// Split-K (flash-decoding) decode attention over a paged KV cache whose pages each carry their own
// format: f32, f16, or KIVI int4/int2 (ops/kv_quant.h: keys per channel over the page, values
// per token in groups of 32 channels, f16 scale/zero inside the page). The math is the CPU op's
// (ops/paged_attention.h): one query token per sequence, GQA, online softmax over the spans.
//
// Work is split three ways so that one long sequence still fills the GPU:
//   * a work item is a run of at most `tokens_per_item` consecutive tokens of one sequence
//     (crossing span boundaries; BuildPagedWorkItems cuts them on the host from the span sizes);
//   * each (work item, KV head, query-head subgroup of at most kPagedMaxRep heads) is one warp;
//     the warp copies up to 32 tokens of one span at a time into shared memory with cp.async,
//     K and V apart so that each copy overlaps work on the other (V's copy the scores, the next
//     tile's K copy this tile's P·V); it scores the tokens lane-per-token (quantised keys: the
//     page's key scale is folded into the query once per span, q·zero added to each score, so
//     codes are never dequantised for scores), then accumulates P·V lane-per-channel with the
//     value codes dequantised on the fly;
//   * a second kernel merges each sequence's items (partial max, sum and output) per query head.
// Scores are kept in log2 units (scale·log2 e folded in), so the exps are exp2f.
//
// Requirements (LaunchPagedDecodeAttention answers cudaErrorInvalidValue otherwise): head_dim 32
// (CUDA cores only: tensor_cores refused), 64 or 128; every span's k and v, and a quantised span's
// k_scale and k_zero, 16-byte aligned (rows of one head are then 16-byte aligned too). Never
// allocates: the caller passes the descriptors, the items and a workspace on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace framezip::engine::cuda {

// Page formats, with kv::KvFormat's values (kF32 0, kF16 1, kInt4 2, kInt2 3).
enum class PagedKvFormat : int32_t { kF32 = 0, kF16 = 1, kInt4 = 2, kInt2 = 3 };

// One span (a page's filled slots) on the device: ops::KvSpan with device pointers.
struct PagedSpanDesc {
  const void* k = nullptr;  // dense: [num_tokens, G, d] elements; quantised: code rows
  const void* v = nullptr;
  const void* k_scale = nullptr;  // f16 [G·d]              (quantised only)
  const void* k_zero = nullptr;   // f16 [G·d]
  const void* v_scale = nullptr;  // f16 [G·d/32, v_param_stride]
  const void* v_zero = nullptr;   // f16 [G·d/32, v_param_stride]
  int32_t num_tokens = 0;
  int32_t v_param_stride = 0;
  int32_t format = 0;  // PagedKvFormat
  int32_t reserved = 0;
};

// `num_tokens` tokens of sequence `seq`, starting at token `token` of span `span` and continuing
// through the following spans of that sequence.
struct PagedWorkItem {
  int32_t seq = 0;
  int32_t span = 0;
  int32_t token = 0;
  int32_t num_tokens = 0;
};

inline constexpr int kPagedMaxRep = 8;  // query heads one warp serves (more: several warps)

struct PagedDecodeLaunch {
  const float* q = nullptr;              // [batch, heads, head_dim]
  float* out = nullptr;                  // [batch, heads, head_dim]; must not alias q
  // Null, or [batch, heads]: each row's log-sum-exp of its scaled scores, ln Σ_t e^(scale·q·k_t)
  // (-inf for a sequence without tokens), so a caller can merge this share with other parts.
  float* lse = nullptr;
  const PagedSpanDesc* spans = nullptr;  // device
  const PagedWorkItem* items = nullptr;  // device, sequence by sequence in order
  const int32_t* item_offsets =
      nullptr;  // device [batch + 1]: sequence b owns items [o[b], o[b+1])
  int32_t num_items = 0;
  float* workspace = nullptr;  // device, PagedDecodeWorkspaceFloats(...) floats
  int batch = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  float scale = 0;  // already resolved (not 0)
  // The tensor-core variant (paged_attention_mma.cu: mma.sync m16n8k16, f16 operands, f32
  // accumulation; up to 16 query heads per warp): rounds q ⊙ key scale, K, P and dequantised V to
  // f16, so it agrees with the CPU op to ~1e-3 instead of ~1e-6. On an H200 (bench/RESULTS.md)
  // it is the faster kernel over f16 pages and the slower over int4/int2 ones. At head_dim 128
  // it needs 106 KiB of shared memory per block: more than sm_86/sm_89 allow, where
  // the launch returns the opt-in's error (H100/H200 and A100 have room). f32 spans go through
  // f16 too, so values above 65504 there become inf: the op never sets this flag (tests, bench).
  bool tensor_cores = false;
};

// Floats of workspace the launch needs: per item and query head, the partial output, max and sum.
size_t PagedDecodeWorkspaceFloats(int32_t num_items, int heads, int head_dim);

// Host side: cuts the sequences' spans (span_tokens[i] tokens each; sequence b owns spans
// [span_offsets[b], span_offsets[b+1])) into items of at most tokens_per_item tokens. Spans with
// no tokens are skipped; a sequence with no tokens gets no item (and a zero output).
void BuildPagedWorkItems(const int32_t* span_tokens, const int32_t* span_offsets, int batch,
                         int32_t tokens_per_item, std::vector<PagedWorkItem>& items,
                         std::vector<int32_t>& item_offsets);

// Host side: a tokens_per_item that gives about `target_warps` warps for `total_tokens` tokens
// (at least 64 tokens per warp, a multiple of 32).
int32_t ChoosePagedTokensPerItem(int64_t total_tokens, int kv_heads, int heads, int sm_count);

cudaError_t LaunchPagedDecodeAttention(const PagedDecodeLaunch& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
