// The memory a caching allocator carves up: whole segments from cudaMalloc / cudaMallocAsync in
// production (cuda_raw_allocator.h), plain host memory with a capacity in tests. The caching
// allocator is written only against this interface, so all of its logic is tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace framezip::engine {

// An opaque stream: a cudaStream_t's value (0 is the legacy default stream). Memory is handed out
// per stream; see caching_device_allocator.h for the rule.
using StreamId = std::uintptr_t;

class RawDeviceAllocator {
 public:
  virtual ~RawDeviceAllocator() = default;

  // `bytes` of device memory, at least 256-byte aligned, usable on `stream` (a stream-ordered
  // implementation allocates in that stream's order). RESOURCE_EXHAUSTED when the device has not
  // that much free: the caching allocator then releases its cache and retries once. Any other
  // error is returned to the caller unchanged (and a sticky CUDA error has marked the device
  // unhealthy already).
  virtual StatusOr<void*> Allocate(size_t bytes, StreamId stream) = 0;

  // Returns a segment from Allocate() with the same size and stream. Never fails for the caller:
  // an implementation logs (and classifies) its own errors.
  virtual void Free(void* ptr, size_t bytes, StreamId stream) = 0;

  // Bytes the device has free right now (cudaMemGetInfo), for out-of-memory messages.
  virtual StatusOr<size_t> FreeBytes() = 0;
};

}  // namespace framezip::engine
