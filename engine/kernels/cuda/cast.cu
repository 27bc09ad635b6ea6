#include <cuda_fp8.h>

#include "engine/kernels/cuda/block_reduce.cuh"
#include "engine/kernels/cuda/cast.cuh"
#include "engine/kernels/cuda/float_io.cuh"

namespace framezip::engine::cuda {
namespace {

__global__ void CastKernel(CastParams p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += stride) {
    StoreFloat(p.out, p.out_kind, i, LoadAsFloat(p.in, p.in_kind, i));
  }
}

constexpr int kQuantizeThreads = 256;

__global__ void QuantizeRowsFp8Kernel(QuantizeRowsFp8Params p) {
  __shared__ float scratch[kQuantizeThreads / 32];
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * p.k;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < p.k; i += kQuantizeThreads) amax = fmaxf(amax, fabsf(x[i]));
  amax = BlockMax<kQuantizeThreads>(amax, scratch);
  // The same two f32 operations as the host reference (no FMA: a product, then the cast).
  const float inv = amax > 0.f ? __fdiv_rn(448.f, amax) : 0.f;
  if (threadIdx.x == 0) p.scale[row] = __fdiv_rn(amax, 448.f);
  uint8_t* q = p.q + row * p.k;
  for (int64_t i = threadIdx.x; i < p.k; i += kQuantizeThreads) {
    q[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fmul_rn(x[i], inv), __NV_SATFINITE, __NV_E4M3));
  }
}

}  // namespace

cudaError_t LaunchQuantizeRowsFp8(const QuantizeRowsFp8Params& params, cudaStream_t stream) {
  if (params.rows == 0) return cudaSuccess;
  if (params.rows > 0x7fffffff) return cudaErrorInvalidValue;
  QuantizeRowsFp8Kernel<<<static_cast<unsigned>(params.rows), kQuantizeThreads, 0, stream>>>(
      params);
  return cudaGetLastError();
}

cudaError_t LaunchCast(const CastParams& params, cudaStream_t stream) {
  if (params.n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks64 = (params.n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(blocks64 < 65535 * 16 ? blocks64 : 65535 * 16);
  CastKernel<<<blocks, kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
