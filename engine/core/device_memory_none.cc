#include <cstdlib>
#include <cstring>

#include "engine/core/device_memory.h"
#include "engine/core/step_counters.h"

namespace framezip::engine {

StatusOr<std::shared_ptr<void>> AllocateDeviceMemory(Device device, size_t) {
  return absl::UnimplementedError(
      fmt::format("cannot allocate on {}: built without CUDA", DeviceName(device)));
}

StatusOr<CachingAllocatorStats> DeviceBufferAllocatorStats(Device device) {
  return absl::UnimplementedError(
      fmt::format("no device allocator for {}: built without CUDA", DeviceName(device)));
}

Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (!dst_device.is_cpu() || !src_device.is_cpu()) {
    return absl::UnimplementedError("device copies need CUDA: built without CUDA");
  }
  if (bytes != 0) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

StatusOr<std::shared_ptr<void>> AllocateStagingHost(Device device, size_t bytes) {
  if (!device.is_cpu()) {
    return absl::UnimplementedError(
        fmt::format("no staging memory for {}: built without CUDA", DeviceName(device)));
  }
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (p == nullptr) return absl::ResourceExhaustedError("staging memory: host out of memory");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

Status UploadAsync(void* dst, Device device, const void* src, size_t bytes) {
  if (!device.is_cpu()) return absl::UnimplementedError("device uploads need CUDA");
  if (bytes != 0) std::memcpy(dst, src, bytes);
  CountCopy(CopyDirection::kHostToDevice);
  return absl::OkStatus();
}

Status DownloadAsync(void* dst, const void* src, Device device, size_t bytes) {
  if (!device.is_cpu()) return absl::UnimplementedError("device downloads need CUDA");
  if (bytes != 0) std::memcpy(dst, src, bytes);
  CountCopy(CopyDirection::kDeviceToHost);
  return absl::OkStatus();
}

Status UploadStepPlan(void* dst, Device device, const void* src, size_t bytes) {
  FZ_RETURN_IF_ERROR(UploadAsync(dst, device, src, bytes));
  CountPlanUpload();
  return absl::OkStatus();
}

StatusOr<std::shared_ptr<void>> RecordStepFence(Device device) {
  if (!device.is_cpu()) return absl::UnimplementedError("step fences need CUDA");
  return std::shared_ptr<void>();
}

StatusOr<bool> StepFencePassed(Device, const std::shared_ptr<void>&) { return true; }

Status WaitStepFence(Device, const std::shared_ptr<void>&) { return absl::OkStatus(); }

Status ZeroBytes(void* dst, Device device, size_t bytes) {
  if (!device.is_cpu())
    return absl::UnimplementedError("device memset needs CUDA: built without CUDA");
  if (bytes != 0) std::memset(dst, 0, bytes);
  return absl::OkStatus();
}

}  // namespace framezip::engine
