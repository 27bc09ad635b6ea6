#include <cuda_runtime_api.h>

#include "engine/core/cuda_status_cuda.h"
#include "engine/core/device_memory_info.h"
#include "engine/core/scoped_cuda_device_cuda.h"

namespace framezip::engine {

StatusOr<DeviceMemoryInfo> QueryDeviceMemoryInfo(Device device) {
  if (device.is_cpu()) return UnimplementedError("no device memory information for the CPU");
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  ScopedCudaDevice scope(device.index);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  FZ_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return DeviceMemoryInfo{free_bytes, total_bytes};
}

}  // namespace framezip::engine
