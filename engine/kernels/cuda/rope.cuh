// Rotary position embedding, half-split (rotate_half / NeoX) layout, in place on f32 [T, H, d]:
//   f = float(pos[t]) · inv_freq[i],  x'[i] = x[i]·cos f − x[i+d/2]·sin f,
//                                     x'[i+d/2] = x[i+d/2]·cos f + x[i]·sin f.
// The inverse frequencies travel by value in the params (computed on the host exactly as HF
// does, llama3 rescaling included), so the launch needs no device buffer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace framezip::engine::cuda {

inline constexpr int kRopeMaxHalfDim = 256;  // head_dim up to 512

struct RopeParams {
  float* x = nullptr;                // [tokens, heads, head_dim], rotated in place
  const int32_t* positions = nullptr;  // [tokens], device memory, each >= 0
  int64_t tokens = 0;
  int heads = 0;
  int head_dim = 0;  // even, at most 2 * kRopeMaxHalfDim
  float inv_freq[kRopeMaxHalfDim] = {};
};

// Never allocates; cudaErrorInvalidValue when head_dim is odd or too large.
cudaError_t LaunchRope(const RopeParams& params, cudaStream_t stream);

// The fused q/k/v projection's output split and rotated (ops::RopeSplitQkv): row t of qkv is
// [q heads | k heads | v heads] · head_dim; q and k are written rotated as LaunchRope rotates them
// (the same angles and arithmetic), v copied.
struct RopeSplitQkvParams {
  const float* qkv = nullptr;  // [tokens, (q_heads + 2·kv_heads)·head_dim]
  float* q = nullptr;          // [tokens, q_heads, head_dim]
  float* k = nullptr;          // [tokens, kv_heads, head_dim]
  float* v = nullptr;          // [tokens, kv_heads, head_dim]
  const int32_t* positions = nullptr;  // [tokens], device memory, each >= 0
  int64_t tokens = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // even, at most 2 * kRopeMaxHalfDim
  float inv_freq[kRopeMaxHalfDim] = {};
};

cudaError_t LaunchRopeSplitQkv(const RopeSplitQkvParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
