#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "engine/core/cuda_raw_allocator.h"
#include "engine/core/cuda_stream_cuda.h"
#include "engine/core/device_memory.h"
#include "engine/core/step_counters.h"

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

// Device Buffers come from one caching allocator per device (caching_device_allocator.h), its
// blocks tagged stream 0. The ops launch on framezip's blocking stream (cuda_stream_cuda.h), which
// CUDA orders with the legacy default stream, so stream order alone makes reuse safe. cudaMalloc
// and cudaFree synchronise the device and cost tens of microseconds, and one decode step of the
// whole-model path allocates about ten temporaries per layer. FRAMEZIP_NO_CUDA_MEMORY_CACHING=1
// turns the cache off (every Buffer its own cudaMalloc), as PYTORCH_NO_CUDA_MEMORY_CACHING does:
// compute-sanitizer's memcheck can then see an overrun past a temporary, which inside a cached
// segment would land in a neighbouring block unnoticed.
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
  if (dst_device.is_cpu() || src_device.is_cpu()) {
    // A synchronous copy across the bus: the host waits for the device (and, from pageable
    // memory, for everything queued before it).
    CountCopy(dst_device.is_cpu() ? CopyDirection::kDeviceToHost : CopyDirection::kHostToDevice);
    CountHostSync();
  } else {
    CountCopy(CopyDirection::kDeviceToDevice);
  }
  return FromCuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

StatusOr<std::shared_ptr<void>> AllocateStagingHost(Device device, size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64 + 64;
  if (device.is_cpu()) {
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) return absl::ResourceExhaustedError("staging memory: host out of memory");
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  void* p = nullptr;
  FZ_RETURN_IF_ERROR(
      FromCuda(cudaHostAlloc(&p, rounded, cudaHostAllocPortable), "cudaHostAlloc (step plan)"));
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

StatusOr<cudaStream_t> FramezipStream(int index) {
  static std::mutex mu;
  static auto* streams = new std::map<int, cudaStream_t>();  // never destroyed, as the allocators
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams->find(index);
  if (it != streams->end()) return it->second;
  DeviceGuard guard(index);
  cudaStream_t stream = nullptr;
  FZ_RETURN_IF_ERROR(FromCuda(cudaStreamCreateWithFlags(&stream, cudaStreamDefault),
                              "cudaStreamCreate (framezip stream)"));
  streams->emplace(index, stream);
  return stream;
}

cudaStream_t CurrentFramezipStream() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  StatusOr<cudaStream_t> stream = FramezipStream(device);
  return stream.ok() ? *stream : nullptr;
}

Status UploadStepPlan(void* dst, Device device, const void* src, size_t bytes) {
  CountPlanUpload();
  return UploadAsync(dst, device, src, bytes);
}

namespace {

// A copy between page-locked host memory and `device`, queued on framezip's stream of the device
// (a memcpy on the CPU), counted in `direction`.
Status CopyAsyncOnStep(void* dst, const void* src, size_t bytes, Device device,
                       CopyDirection direction) {
  CountCopy(direction);
  if (device.is_cpu()) {
    if (bytes != 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  FZ_ASSIGN_OR_RETURN(cudaStream_t stream, FramezipStream(device.index));
  DeviceGuard guard(device.index);
  const bool up = direction == CopyDirection::kHostToDevice;
  return FromCuda(cudaMemcpyAsync(dst, src, bytes,
                                  up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream),
                  up ? "cudaMemcpyAsync (upload)" : "cudaMemcpyAsync (download)");
}

}  // namespace

Status UploadAsync(void* dst, Device device, const void* src, size_t bytes) {
  return CopyAsyncOnStep(dst, src, bytes, device, CopyDirection::kHostToDevice);
}

Status DownloadAsync(void* dst, const void* src, Device device, size_t bytes) {
  return CopyAsyncOnStep(dst, src, bytes, device, CopyDirection::kDeviceToHost);
}

StatusOr<std::shared_ptr<void>> RecordStepFence(Device device) {
  if (device.is_cpu()) return std::shared_ptr<void>();
  FZ_ASSIGN_OR_RETURN(cudaStream_t stream, FramezipStream(device.index));
  DeviceGuard guard(device.index);
  cudaEvent_t event = nullptr;
  FZ_RETURN_IF_ERROR(
      FromCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
  if (const Status recorded = FromCuda(cudaEventRecord(event, stream), "cudaEventRecord");
      !recorded.ok()) {
    cudaEventDestroy(event);
    return recorded;
  }
  return std::shared_ptr<void>(event,
                               [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
}

StatusOr<bool> StepFencePassed(Device device, const std::shared_ptr<void>& fence) {
  if (device.is_cpu() || fence == nullptr) return true;
  const cudaError_t state = cudaEventQuery(static_cast<cudaEvent_t>(fence.get()));
  if (state == cudaSuccess) return true;
  if (state == cudaErrorNotReady) return false;
  FZ_RETURN_IF_ERROR(FromCuda(state, "cudaEventQuery (step fence)"));
  return false;
}

Status WaitStepFence(Device device, const std::shared_ptr<void>& fence) {
  if (device.is_cpu() || fence == nullptr) return absl::OkStatus();
  auto* event = static_cast<cudaEvent_t>(fence.get());
  const cudaError_t state = cudaEventQuery(event);
  if (state == cudaSuccess) return absl::OkStatus();
  if (state != cudaErrorNotReady) return FromCuda(state, "cudaEventQuery (step fence)");
  CountHostSync();
  return FromCuda(cudaEventSynchronize(event), "cudaEventSynchronize (step fence)");
}

Status ZeroBytes(void* dst, Device device, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (device.is_cpu()) {
    std::memset(dst, 0, bytes);
    return absl::OkStatus();
  }
  FZ_ASSIGN_OR_RETURN(cudaStream_t stream, FramezipStream(device.index));
  DeviceGuard guard(device.index);  // the stream of the tensor's own device, where the ops run
  return FromCuda(cudaMemsetAsync(dst, 0, bytes, stream), "cudaMemsetAsync");
}

}  // namespace framezip::engine
