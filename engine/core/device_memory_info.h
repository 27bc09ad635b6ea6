// How much memory a device has free, for sizing the KV page pool (kv_pool_sizing.h) and for
// out-of-memory messages. Implemented by device_memory_info_cuda.cc (cudaMemGetInfo) in CUDA builds
// and device_memory_info_none.cc otherwise.
#pragma once

#include <cstddef>

#include "common/status.h"
#include "engine/core/device.h"

namespace framezip::engine {

struct DeviceMemoryInfo {
  size_t free_bytes = 0;   // free to this process now (other processes' use already subtracted)
  size_t total_bytes = 0;  // the device's capacity
};

// UNIMPLEMENTED in a CPU-only build or for the CPU device, UNAVAILABLE without a usable GPU,
// otherwise the CUDA error's status (cuda_error_class.h).
StatusOr<DeviceMemoryInfo> QueryDeviceMemoryInfo(Device device);

}  // namespace framezip::engine
