// Device (GPU) memory for Buffer. Implemented by device_memory_cuda.cc in CUDA builds and by
// device_memory_none.cc otherwise, so no header needs a CUDA #ifdef.
#pragma once

#include <cstddef>
#include <memory>

#include "common/status.h"
#include "engine/core/caching_device_allocator.h"
#include "engine/core/device.h"

namespace framezip::engine {

// RESOURCE_EXHAUSTED when the GPU is out of memory, UNIMPLEMENTED in a CPU-only build.
StatusOr<std::shared_ptr<void>> AllocateDeviceMemory(Device device, size_t bytes);

// The counters of the caching allocator behind device Buffers (device_memory_cuda.cc), like
// torch.cuda.memory_stats(). UNIMPLEMENTED in a CPU-only build; FAILED_PRECONDITION when
// FRAMEZIP_NO_CUDA_MEMORY_CACHING turned the cache off.
StatusOr<CachingAllocatorStats> DeviceBufferAllocatorStats(Device device);

// Copies between any two of host and device memory (synchronously).
Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

// Zero-fills `bytes` at `dst`. On a GPU the memset is queued on the default stream, where every op
// launches, so later ops see the zeros without a host wait.
Status ZeroBytes(void* dst, Device device, size_t bytes);

}  // namespace framezip::engine
