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
