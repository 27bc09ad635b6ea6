// Asynchronous global-to-shared copies (sm_80+: cp.async), which bypass the registers so a warp
// can compute on one tile while the next one is in flight. Include from .cu only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace framezip::engine::cuda {

// 16-byte copy through L2 only (the streamed K/V are read once); src_bytes < 16 zero-fills the
// rest (0: all zeros, the source is not read).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, int src_bytes = 16) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes));
}

// 8-byte copy (the .cg form takes 16 bytes only, so this one may also fill L1).
__device__ __forceinline__ void CpAsync8(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
}

// Closes the copies this thread issued since the last commit into one group.
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most N of this thread's groups are still in flight. Other threads' copies are
// visible only after a barrier over them (__syncwarp or __syncthreads) that follows their waits.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace framezip::engine::cuda
