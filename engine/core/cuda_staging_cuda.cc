#include <cuda_runtime_api.h>

#include "common/logging.h"
#include "engine/core/cuda_staging.h"
#include "engine/core/cuda_status_cuda.h"
#include "engine/core/scoped_cuda_device_cuda.h"

namespace framezip::engine {
namespace {

cudaStream_t ToCudaStream(StreamId stream) { return reinterpret_cast<cudaStream_t>(stream); }

class CudaPinnedHostAllocator final : public RawHostAllocator {
 public:
  StatusOr<void*> Allocate(size_t bytes) override {
    void* ptr = nullptr;
    FZ_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable), "cudaHostAlloc");
    return ptr;
  }
  void Free(void* ptr, size_t) override {
    const Status status = CudaErrorToStatus(cudaFreeHost(ptr), "cudaFreeHost");
    if (!status.ok()) FZ_LOG_ERROR("{}", MessageOf(status));
  }
};

// Owns one event; Done() polls it, Wait() blocks on it.
class CudaEventFence final : public CopyFence {
 public:
  explicit CudaEventFence(cudaEvent_t event) : event_(event) {}
  ~CudaEventFence() override { cudaEventDestroy(event_); }
  CudaEventFence(const CudaEventFence&) = delete;
  CudaEventFence& operator=(const CudaEventFence&) = delete;

  bool Done() override {
    if (done_) return true;
    const cudaError_t err = cudaEventQuery(event_);
    if (err == cudaErrorNotReady) return false;
    // Any other error is reported by Wait(); report "done" so nobody polls forever.
    done_ = true;
    if (err != cudaSuccess) error_ = CudaErrorToStatus(err, "cudaEventQuery");
    return true;
  }
  Status Wait() override {
    if (!done_) {
      error_ = CudaErrorToStatus(cudaEventSynchronize(event_), "cudaEventSynchronize");
      done_ = true;
    }
    return error_;
  }

 private:
  cudaEvent_t event_;
  bool done_ = false;
  Status error_;
};

class CudaCopyEngine final : public AsyncCopyEngine {
 public:
  explicit CudaCopyEngine(Device device) : device_(device) {}

  Status CopyAsync(void* dst, const void* src, size_t bytes, CopyDirection direction,
                   StreamId stream) override {
    ScopedCudaDevice scope(device_.index);
    cudaMemcpyKind kind = cudaMemcpyDefault;
    switch (direction) {
      case CopyDirection::kHostToDevice:
        kind = cudaMemcpyHostToDevice;
        break;
      case CopyDirection::kDeviceToHost:
        kind = cudaMemcpyDeviceToHost;
        break;
    }
    FZ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, kind, ToCudaStream(stream)),
                            "cudaMemcpyAsync (KV staging)");
    return absl::OkStatus();
  }

  StatusOr<std::shared_ptr<CopyFence>> RecordFence(StreamId stream) override {
    ScopedCudaDevice scope(device_.index);
    cudaEvent_t event = nullptr;
    FZ_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                            "cudaEventCreate");
    auto fence = std::make_shared<CudaEventFence>(event);  // owns the event from here on
    FZ_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, ToCudaStream(stream)), "cudaEventRecord");
    return std::shared_ptr<CopyFence>(std::move(fence));
  }

 private:
  const Device device_;
};

}  // namespace

StatusOr<std::unique_ptr<RawHostAllocator>> CreateCudaPinnedHostAllocator() {
  if (CudaDeviceCount() == 0) return UnavailableError("no usable GPU: {}", CudaUnavailableReason());
  return std::unique_ptr<RawHostAllocator>(new CudaPinnedHostAllocator());
}

StatusOr<std::unique_ptr<AsyncCopyEngine>> CreateCudaCopyEngine(Device device) {
  if (device.is_cpu()) return InvalidArgumentError("CreateCudaCopyEngine: not a CUDA device");
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  return std::unique_ptr<AsyncCopyEngine>(new CudaCopyEngine(device));
}

}  // namespace framezip::engine
