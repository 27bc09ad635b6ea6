// Multi-head attention, f32, for prefill (causal, optionally a chunk after earlier keys, or a
// per-query key prefix) and vision towers (bidirectional), with grouped-query attention:
//   out[b,i,h,:] = Σ_j softmax_j(scale · q[b,i,h,:]·k[b,j,g,:]) · v[b,j,g,:],  g = h / (H/G),
// over the keys j query i may see. Tiled with an online softmax (running max and sum, as
// FlashAttention-2): no [Tq, Tk] matrix exists anywhere, shared memory is fixed per block.
//
// This is the correctness-first version on CUDA cores (f32 FMAs, one key per lane for the scores,
// one head-dim slice per lane for P·V); the tensor-core bf16 kernel that the torch-SDPA target
// needs is a later step and must agree with this one.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace framezip::engine::cuda {

inline constexpr int kAttentionMaxHeadDim = 128;

struct AttentionParams {
  const float* q = nullptr;  // [batch, tq, heads, head_dim]
  const float* k = nullptr;  // [batch, tk, kv_heads, head_dim]
  const float* v = nullptr;  // [batch, tk, kv_heads, head_dim]
  float* out = nullptr;      // [batch, tq, heads, head_dim]; must not alias q, k, v
  int64_t batch = 0;
  int64_t tq = 0;
  int64_t tk = 0;
  int heads = 0;
  int kv_heads = 0;  // divides heads
  int head_dim = 0;  // at most kAttentionMaxHeadDim
  float scale = 0;   // already resolved (not 0)
  bool causal = false;
  int64_t q_offset = 0;              // causal: key position of query 0
  const int32_t* key_limit = nullptr;  // device [tq] or nullptr: query i sees keys [0, limit[i])
};

// Never allocates; cudaErrorInvalidValue for head_dim > kAttentionMaxHeadDim or bad head counts.
cudaError_t LaunchAttention(const AttentionParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
