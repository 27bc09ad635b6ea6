// Device (GPU) memory for Buffer. Implemented by device_memory_cuda.cc in CUDA builds and by
// device_memory_none.cc otherwise, so no header needs a CUDA #ifdef.
#pragma once

#include <cstddef>
#include <memory>

#include "common/status.h"
#include "engine/core/device.h"

namespace framezip::engine {

// RESOURCE_EXHAUSTED when the GPU is out of memory, UNIMPLEMENTED in a CPU-only build.
StatusOr<std::shared_ptr<void>> AllocateDeviceMemory(Device device, size_t bytes);

// Copies between any two of host and device memory (synchronously).
Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

}  // namespace framezip::engine
