#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "engine/core/cuda_raw_allocator.h"
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

// Device Buffers come from one caching allocator per device (caching_device_allocator.h) on
// stream 0, the legacy default stream every op launches on, so stream order alone makes reuse
// safe. cudaMalloc and cudaFree synchronise the device and cost tens of microseconds, and one
// decode step of the whole-model path allocates about ten temporaries per layer.
// FRAMEZIP_NO_CUDA_MEMORY_CACHING=1 turns the cache off (every Buffer its own cudaMalloc), as
// PYTORCH_NO_CUDA_MEMORY_CACHING does: compute-sanitizer's memcheck can then see an overrun past
// a temporary, which inside a cached segment would land in a neighbouring block unnoticed.
bool MemoryCachingDisabled() {
  static const bool disabled = [] {
    const char* env = std::getenv("FRAMEZIP_NO_CUDA_MEMORY_CACHING");
    return env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0;
  }();
  return disabled;
}

StatusOr<CachingDeviceAllocator*> CachingAllocatorFor(Device device) {
  struct PerDevice {
    std::unique_ptr<RawDeviceAllocator> raw;
    std::unique_ptr<CachingDeviceAllocator> caching;
  };
  static std::mutex mu;
  // Never destroyed: blocks may be freed by static destructors after main returns.
  static auto* allocators = new std::map<int, PerDevice>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = allocators->find(device.index);
  if (it == allocators->end()) {
    FZ_ASSIGN_OR_RETURN(auto raw,
                        CreateCudaRawAllocator(device, CudaRawAllocatorMode::kSynchronous));
    PerDevice entry;
    entry.caching = std::make_unique<CachingDeviceAllocator>(raw.get());
    entry.raw = std::move(raw);
    it = allocators->emplace(device.index, std::move(entry)).first;
  }
  return it->second.caching.get();
}

}  // namespace

StatusOr<std::shared_ptr<void>> AllocateDeviceMemory(Device device, size_t bytes) {
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  if (!MemoryCachingDisabled()) {
    FZ_ASSIGN_OR_RETURN(CachingDeviceAllocator * allocator, CachingAllocatorFor(device));
    return allocator->AllocateShared(bytes == 0 ? 1 : bytes, /*stream=*/0);
  }
  DeviceGuard guard(device.index);
  void* ptr = nullptr;
  FZ_RETURN_IF_ERROR(FromCuda(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), "cudaMalloc"));
  return std::shared_ptr<void>(ptr, [](void* p) { cudaFree(p); });
}

StatusOr<CachingAllocatorStats> DeviceBufferAllocatorStats(Device device) {
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  if (MemoryCachingDisabled()) {
    return absl::FailedPreconditionError(
        "device Buffers bypass the caching allocator (FRAMEZIP_NO_CUDA_MEMORY_CACHING is set)");
  }
  FZ_ASSIGN_OR_RETURN(CachingDeviceAllocator * allocator, CachingAllocatorFor(device));
  return allocator->stats();
}

Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  return FromCuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

Status ZeroBytes(void* dst, Device device, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (device.is_cpu()) {
    std::memset(dst, 0, bytes);
    return absl::OkStatus();
  }
  DeviceGuard guard(device.index);  // the default stream of the tensor's own device
  return FromCuda(cudaMemsetAsync(dst, 0, bytes, nullptr), "cudaMemsetAsync");
}

}  // namespace framezip::engine
