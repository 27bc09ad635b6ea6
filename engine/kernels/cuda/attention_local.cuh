// Sliding-window attention with attention sinks for selected rows of a prefill chunk, f32: the
// CPU op's math (ops/attention_local.h). Chunk row i (key-sequence index p = past + i) attends,
// per query head h in [h0, h0 + nh), to the keys
//   [0, min(sinks, lo)) ∪ [lo, p],  lo = max(0, p - window + 1),
// of the layer's key sequence (past keys, then this chunk's), with the 1/sqrt(d) softmax and GQA
// (query head h reads KV head h / (heads / kv_heads)). Sinks that fall inside the window are
// counted once: the sink range stops where the window starts.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace framezip::engine::cuda {

inline constexpr int kLocalWindowMaxHeadDim = 256;

struct LocalWindowLaunch {
  const float* q = nullptr;       // [t, heads, head_dim]
  const float* k = nullptr;       // [t, kv_heads, head_dim]: this chunk's keys
  const float* v = nullptr;       // [t, kv_heads, head_dim]
  const float* past_k = nullptr;  // [past, kv_heads, head_dim]; null when past = 0
  const float* past_v = nullptr;  // [past, kv_heads, head_dim]; null when past = 0
  float* out = nullptr;  // [t, heads, head_dim]: only the rows' heads [h0, h0 + nh) are written
  const int32_t* rows = nullptr;  // device [num_rows], chunk rows in [0, t), distinct
  int64_t num_rows = 0;
  int64_t past = 0;  // keys before this chunk
  int heads = 0;
  int kv_heads = 0;    // divides heads
  int head_dim = 0;    // at most kLocalWindowMaxHeadDim
  int h0 = 0;          // first query head written
  int nh = 0;          // query heads written, h0 + nh <= heads
  int64_t window = 0;  // >= 1: keys ending at the row's own, itself included
  int64_t sinks = 0;   // >= 0: leading keys of the sequence
  float scale = 0;     // already resolved (1/sqrt(head_dim) for the op)
};

// Never allocates. cudaErrorInvalidValue for head_dim outside [1, kLocalWindowMaxHeadDim], bad
// head counts or ranges, window < 1, sinks < 0, or past > 0 without past_k/past_v.
cudaError_t LaunchLocalWindowAttention(const LocalWindowLaunch& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
