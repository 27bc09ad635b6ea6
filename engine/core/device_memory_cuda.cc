#include <cuda_runtime_api.h>

#include <cstring>

#include "engine/core/device_memory.h"

namespace framezip::engine {
namespace {

Status FromCuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  if (err == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(fmt::format("{}: GPU out of memory", what));
  }
  return absl::InternalError(fmt::format("{}: {}", what, cudaGetErrorString(err)));
}

// RAII: makes `index` current for the scope (the only place device selection happens).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    cudaGetDevice(&previous_);
    cudaSetDevice(index);
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

StatusOr<std::shared_ptr<void>> AllocateDeviceMemory(Device device, size_t bytes) {
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  DeviceGuard guard(device.index);
  void* ptr = nullptr;
  FZ_RETURN_IF_ERROR(FromCuda(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), "cudaMalloc"));
  return std::shared_ptr<void>(ptr, [](void* p) { cudaFree(p); });
}

Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  return FromCuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

}  // namespace framezip::engine
