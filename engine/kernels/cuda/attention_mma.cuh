// Causal/bidirectional prefill attention on tensor cores, FlashAttention-2 style: bf16 q, k, v,
// f32 output. Per block 64 queries (4 warps × 16 rows) of one head; key tiles of 64 in shared
// memory (K row-major, V transposed on the way in); S = Q·Kᵀ as mma.sync.m16n8k16 bf16 with f32
// accumulation, online softmax in registers, P (bf16, from the S fragments) · V as bf16 MMAs, as
// FlashAttention-2 does for bf16 inputs (f16 would keep 3 more bits of P but overflow on V above
// 65504). GQA as attention.cuh. No per-query key prefixes (key_limit).
// The f32 CUDA-core kernel (attention.cuh) stays the reference path; this one is for speed and
// agrees with it to bf16 level (P rounded to bf16). Measured on an H200 in bench/RESULTS.md
// (0.24–0.34× of torch SDPA).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace framezip::engine::cuda {

struct AttentionMmaParams {
  const void* q = nullptr;  // bf16 [batch, tq, heads, head_dim]
  const void* k = nullptr;  // bf16 [batch, tk, kv_heads, head_dim]
  const void* v = nullptr;  // bf16 [batch, tk, kv_heads, head_dim]
  float* out = nullptr;     // f32 [batch, tq, heads, head_dim]
  int64_t batch = 0;
  int64_t tq = 0;
  int64_t tk = 0;
  int heads = 0;
  int kv_heads = 0;
  // 64, 80 or 128. 80 serves SigLIP's 72 (zero-padded by the caller): S = Q·Kᵀ runs in k-steps of
  // 16 channels, so 80 is the smallest size that holds 72, where 128 would nearly double the work.
  int head_dim = 0;
  float scale = 0;   // already resolved (not 0)
  bool causal = false;
  int64_t q_offset = 0;  // causal: key position of query 0
  // The pipelined variant: K/V tiles double-buffered through cp.async, V fragments by
  // ldmatrix.trans; the same arithmetic as the default.
  bool pipelined = false;
};

// Never allocates; cudaErrorInvalidValue for other head dims (not 64, 80 or 128), bad head counts, or k/v not 16-byte
// aligned (q 4-byte, out 8-byte).
cudaError_t LaunchAttentionMma(const AttentionMmaParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
