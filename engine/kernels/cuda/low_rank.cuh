// AttentionPack on the GPU (docs/methods.md §2): packing a factor into its stored format, and the
// fused decompress-and-attend of one decode query row over a low-rank block of visual tokens (the
// same contract as the CPU op engine/ops/low_rank.h LowRankBlockAttend), never rebuilding the
// block's K or V.
//
// Packing writes the bytes kv::LowRankFactor::Encode writes: f16 by round-to-nearest-even; int4
// per (group of group_rows rows, column) the f16 scale max|x| / 7 (round to nearest even), codes
// clamp(rint(x · (1 / scale)), −7, 7) + 8 (0 where the scale is 0) in nibbles, low nibble first.
//
// Attention:
// Flash-decoding in two passes:
//   1. one thread block per chunk of kLowRankChunk tokens, one thread per token: the thread widens
//      its token's U·S rows (f32, f16 or int4 factors), rebuilds its key one rotation pair at a
//      time (R multiply-adds per channel against Vᵀ, read through the cache, the same address in
//      every lane), rotates the pair with half-split RoPE at the token's position and folds it into
//      each query head's score; then the chunk's per-head maximum, e^(s − max), their sum, and
//      z[h, j] = Σ_t e[h, t]·us_v[t, j] over j < rank_t (the value side at each token's rank);
//   2. one thread block per head merges the chunks by their maxima, applies Vᵀ once to z, and the
//      weights of every chunk are rescaled to the block's maximum.
// So a token costs HD·R_k multiply-adds for its key and H·R_v for its value, and no [T, HD] row
// is ever formed.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace framezip::engine::cuda {

// *count += the number of non-finite entries of x[0, n) (count is a device int, not zeroed here).
cudaError_t LaunchCountNonFinite(const float* x, int64_t n, int* count, cudaStream_t stream);

// Tokens per thread block of pass 1 (one thread each).
inline constexpr int kLowRankChunk = 128;

// One factor in device memory, laid out as ops::FactorView says (engine/ops/factor_view.h):
// f32 or f16 row-major [rows, cols]; int4: codes q + 8, element i of the row-major matrix in byte
// i / 2 (low nibble first), value (code − 8)·scale with one f16 scale per (group of group_rows
// rows, column).
struct DeviceFactor {
  enum Format : int { kF32 = 0, kF16 = 1, kInt4 = 2 };
  int format = kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const float* f32 = nullptr;
  const uint16_t* f16 = nullptr;  // IEEE half bit patterns
  const uint8_t* packed = nullptr;
  const uint16_t* scales = nullptr;
  int64_t group_rows = 32;
};

struct EncodeFactorLaunch {
  const float* values = nullptr;  // [rows, cols] f32 row-major
  int64_t rows = 0, cols = 0;
  int format = DeviceFactor::kF16;  // or DeviceFactor::kInt4
  uint16_t* f16 = nullptr;          // kF16: rows·cols half bit patterns
  uint8_t* packed = nullptr;        // kInt4: ceil(rows·cols / 2) bytes
  uint16_t* scales = nullptr;       // kInt4: ceil(rows / group_rows)·cols half bit patterns
  int64_t group_rows = 32;
};

// Queues the packing on `stream` (int4: scales, then bytes). cudaErrorInvalidValue for empty or
// null arguments or another format.
cudaError_t LaunchEncodeFactor(const EncodeFactorLaunch& params, cudaStream_t stream);

struct LowRankAttendLaunch {
  const float* q = nullptr;               // [heads, head_dim] post-RoPE queries
  DeviceFactor key_us;                    // [tokens, rank_k]
  DeviceFactor key_vt;                    // [rank_k, kv_heads·head_dim]
  DeviceFactor value_us;                  // [tokens, rank_v]
  DeviceFactor value_vt;                  // [rank_v, kv_heads·head_dim]
  const int32_t* positions = nullptr;     // [tokens], >= 0
  const uint16_t* value_ranks = nullptr;  // [tokens]; ranks above rank_v are read as rank_v
  const float* inv_freq = nullptr;        // [head_dim / 2] RoPE inverse frequencies
  int64_t tokens = 0;                     // >= 1
  int heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0;  // applied to q·k
  // Outputs: weights [heads, tokens] e^(s − max_h); max, sum [heads]; out [heads, head_dim]
  // Σ_t e^(s − max_h)·ṽ_t, not normalised (ops::BlockAttention).
  float* weights = nullptr;
  float* max = nullptr;
  float* sum = nullptr;
  float* out = nullptr;
  // Scratch of LowRankAttendScratchFloats(...) floats.
  float* scratch = nullptr;
};

// Floats of scratch a launch needs: per chunk and head a maximum and a sum, and an R_v-wide z.
inline size_t LowRankAttendScratchFloats(int64_t tokens, int heads, int64_t rank_v) {
  const size_t chunks = static_cast<size_t>((tokens + kLowRankChunk - 1) / kLowRankChunk);
  return chunks * static_cast<size_t>(heads) * static_cast<size_t>(2 + rank_v);
}

// Shared memory bytes pass 1 needs (the launcher raises the kernel's limit to this when the
// device allows it): q, the chunk's scores, and its U·S rows of keys and values.
inline size_t LowRankAttendSharedBytes(int heads, int head_dim, int64_t rank_k, int64_t rank_v) {
  const size_t h = static_cast<size_t>(heads);
  return sizeof(float) * (h * static_cast<size_t>(head_dim) + h * kLowRankChunk +
                          static_cast<size_t>(rank_k + rank_v) * kLowRankChunk);
}

// Queues both passes on `stream`. Never allocates. cudaErrorInvalidValue for a bad shape
// (counts < 1, heads not a multiple of kv_heads, an odd head_dim, a factor whose shape does not
// match, shared memory beyond the device's opt-in limit).
cudaError_t LaunchLowRankAttend(const LowRankAttendLaunch& params, cudaStream_t stream);

// Merging shares of one decode row's softmax (ops/attention_merge.h, whose CPU code is the
// reference): a base share given normalised with its log-sum-exp (the paged attention's), and
// `parts` shares given as (max, sum, unnormalised out) (the blocks' pass 2 above). One thread block
// per head; every thread finds the head's merged maximum and sum over the parts (few: a layer's
// blocks), then writes its channels. `out` may be `base`: each element is read, then written, by
// one thread.
struct AttentionMergeLaunch {
  const float* base = nullptr;      // [heads, head_dim], normalised
  const float* base_lse = nullptr;  // [heads]
  const float* part_max = nullptr;  // [parts, heads]
  const float* part_sum = nullptr;  // [parts, heads]
  const float* part_out = nullptr;  // [parts, heads, head_dim]
  float* out = nullptr;             // [heads, head_dim]
  float* total_max = nullptr;       // [heads]
  float* total_sum = nullptr;       // [heads]
  int parts = 0;
  int heads = 0;
  int head_dim = 0;
};

cudaError_t LaunchAttentionMerge(const AttentionMergeLaunch& params, cudaStream_t stream);

// Each token's head-averaged probability within the merged softmax, from one part's weights
// (e^(s − max) per head and token): probs[t] = Σ_h e^(max_h − M_h) / (S_h · heads) · w[h, t]. One
// thread per token, reading the heads' weights of a token column (coalesced across the warp).
struct TokenSharesLaunch {
  const float* weights = nullptr;    // [heads, tokens]
  const float* part_max = nullptr;   // [heads]
  const float* total_max = nullptr;  // [heads]
  const float* total_sum = nullptr;  // [heads]
  float* probs = nullptr;            // [tokens]
  int heads = 0;
  int64_t tokens = 0;
};

cudaError_t LaunchTokenShares(const TokenSharesLaunch& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
