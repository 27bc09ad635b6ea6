// Block-wide all-reductions for kernels that give one block to a row: a warp shuffle, then one
// shared slot per warp. Every thread of the block gets the result. kThreads is the block size (a
// multiple of 32, at most 1024); `scratch` holds kThreads / 32 values. Each call starts with a
// barrier, so consecutive calls may share one scratch: the previous call's readers are done
// before it is rewritten.
#pragma once

#include <cuda_runtime.h>

namespace framezip::engine::cuda {

template <int kThreads, class T>
__device__ __forceinline__ T BlockSum(T v, T* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  return total;
}

template <int kThreads>
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

}  // namespace framezip::engine::cuda
