// The production RawDeviceAllocator: device memory from the CUDA runtime, for a
// CachingDeviceAllocator to cache (or, in stream-ordered mode, for temporaries used directly).
// Implemented by cuda_raw_allocator_cuda.cc in CUDA builds and cuda_raw_allocator_none.cc
// otherwise (which returns UNIMPLEMENTED), so this header needs no CUDA #ifdef.
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/core/device.h"
#include "engine/core/raw_device_allocator.h"

namespace framezip::engine {

enum class CudaRawAllocatorMode {
  // cudaMalloc / cudaFree: synchronous, for long-lived memory (weights, the KV page pool) behind
  // a CachingDeviceAllocator. cudaFree waits for the device, so the cache frees rarely.
  kSynchronous,
  // cudaMallocAsync / cudaFreeAsync on the request's stream, from the device's default memory
  // pool with its release threshold raised so freed memory stays cached by the driver: for
  // per-request temporaries. Falls back to kSynchronous where the device or driver has no memory
  // pools (cudaDevAttrMemoryPoolsSupported == 0).
  kStreamOrdered,
};

// An allocator for CUDA device `device.index`; it makes that device current around every call.
// UNIMPLEMENTED in a CPU-only build, UNAVAILABLE without a usable GPU. Allocate() returns
// RESOURCE_EXHAUSTED for cudaErrorMemoryAllocation; other CUDA errors go through
// cuda_error_class.h (a sticky one marks the device unhealthy). Thread-safe.
StatusOr<std::unique_ptr<RawDeviceAllocator>> CreateCudaRawAllocator(Device device,
                                                                     CudaRawAllocatorMode mode);

}  // namespace framezip::engine
