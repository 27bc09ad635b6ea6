#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/kernels/cuda/cast.cuh"

namespace framezip::engine::cuda {
namespace {

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

__global__ void CastKernel(CastParams p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += stride) {
    StoreFloat(p.out, p.out_kind, i, LoadAsFloat(p.in, p.in_kind, i));
  }
}

}  // namespace

cudaError_t LaunchCast(const CastParams& params, cudaStream_t stream) {
  if (params.n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks64 = (params.n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(blocks64 < 65535 * 16 ? blocks64 : 65535 * 16);
  CastKernel<<<blocks, kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
