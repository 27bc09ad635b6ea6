// Device-side loads and stores of the float dtypes the engine keeps (f32, f16, bf16) as f32.
// Shared by the kernels in this folder; include only from .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "engine/kernels/cuda/cast.cuh"

namespace framezip::engine::cuda {

__device__ __forceinline__ float LoadAsFloat(const void* p, FloatKind k, int64_t i) {
  switch (k) {
    case FloatKind::kF32:
      return static_cast<const float*>(p)[i];
    case FloatKind::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case FloatKind::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
  return 0.f;
}

__device__ __forceinline__ void StoreFloat(void* p, FloatKind k, int64_t i, float v) {
  switch (k) {
    case FloatKind::kF32:
      static_cast<float*>(p)[i] = v;
      break;
    case FloatKind::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    case FloatKind::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
  }
}

// Grid size for a grid-stride loop over n elements: enough blocks to fill any current GPU, never
// more than the work needs.
inline int GridStrideBlocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  constexpr int64_t kMaxBlocks = 65535 * 16;
  return static_cast<int>(blocks < kMaxBlocks ? (blocks > 0 ? blocks : 1) : kMaxBlocks);
}

}  // namespace framezip::engine::cuda
