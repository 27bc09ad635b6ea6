#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

#include "common/logging.h"
#include "engine/core/cuda_raw_allocator.h"
#include "engine/core/cuda_status_cuda.h"
#include "engine/core/device_memory_info.h"
#include "engine/core/scoped_cuda_device_cuda.h"

namespace framezip::engine {
namespace {

cudaStream_t ToCudaStream(StreamId stream) { return reinterpret_cast<cudaStream_t>(stream); }

class CudaRawAllocator final : public RawDeviceAllocator {
 public:
  CudaRawAllocator(Device device, bool stream_ordered)
      : device_(device), stream_ordered_(stream_ordered) {}

  StatusOr<void*> Allocate(size_t bytes, StreamId stream) override {
    ScopedCudaDevice scope(device_.index);
    void* ptr = nullptr;
    const cudaError_t err = stream_ordered_ ? cudaMallocAsync(&ptr, bytes, ToCudaStream(stream))
                                            : cudaMalloc(&ptr, bytes);
    FZ_RETURN_IF_ERROR(CudaErrorToStatus(err, stream_ordered_ ? "cudaMallocAsync" : "cudaMalloc"));
    return ptr;
  }

  void Free(void* ptr, size_t, StreamId stream) override {
    ScopedCudaDevice scope(device_.index);
    const cudaError_t err =
        stream_ordered_ ? cudaFreeAsync(ptr, ToCudaStream(stream)) : cudaFree(ptr);
    const Status status = CudaErrorToStatus(err, stream_ordered_ ? "cudaFreeAsync" : "cudaFree");
    // Nobody can act on a failed free; a sticky error has marked the device unhealthy already.
    if (!status.ok()) FZ_LOG_ERROR("{}", MessageOf(status));
  }

  StatusOr<size_t> FreeBytes() override {
    FZ_ASSIGN_OR_RETURN(const DeviceMemoryInfo info, QueryDeviceMemoryInfo(device_));
    return info.free_bytes;
  }

 private:
  const Device device_;
  const bool stream_ordered_;
};

// True when the device has stream-ordered memory pools; then raises the default pool's release
// threshold so memory freed with cudaFreeAsync stays in the pool instead of going back to the
// driver at every synchronisation (the driver's default threshold is 0).
StatusOr<bool> PrepareMemoryPool(Device device) {
  ScopedCudaDevice scope(device.index);
  int supported = 0;
  FZ_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device.index),
      "cudaDeviceGetAttribute(MemoryPoolsSupported)");
  if (supported == 0) return false;
  cudaMemPool_t pool = nullptr;
  FZ_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device.index),
                          "cudaDeviceGetDefaultMemPool");
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  FZ_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
      "cudaMemPoolSetAttribute(ReleaseThreshold)");
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<RawDeviceAllocator>> CreateCudaRawAllocator(Device device,
                                                                     CudaRawAllocatorMode mode) {
  if (device.is_cpu()) return InvalidArgumentError("CreateCudaRawAllocator: not a CUDA device");
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  bool stream_ordered = false;
  switch (mode) {
    case CudaRawAllocatorMode::kSynchronous:
      break;
    case CudaRawAllocatorMode::kStreamOrdered: {
      FZ_ASSIGN_OR_RETURN(stream_ordered, PrepareMemoryPool(device));
      if (!stream_ordered) {
        FZ_LOG_WARN("{}: no stream-ordered memory pools, temporaries use cudaMalloc",
                    DeviceName(device));
      }
      break;
    }
  }
  return std::unique_ptr<RawDeviceAllocator>(new CudaRawAllocator(device, stream_ordered));
}

}  // namespace framezip::engine
