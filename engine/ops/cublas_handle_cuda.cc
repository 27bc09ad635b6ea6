#include "engine/ops/cublas_handle_cuda.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "engine/core/cuda_stream_cuda.h"

namespace framezip::engine::ops {
namespace {

// This thread's handles, indexed by device ordinal; destroyed with the thread.
class ThreadHandles {
 public:
  ~ThreadHandles() {
    for (cublasHandle_t h : handles_) {
      if (h != nullptr) cublasDestroy(h);  // errors at process exit are not actionable
    }
  }
  cublasHandle_t& For(int device) {
    if (static_cast<size_t>(device) >= handles_.size()) handles_.resize(device + 1, nullptr);
    return handles_[device];
  }

 private:
  std::vector<cublasHandle_t> handles_;
};

}  // namespace

Status CublasStatus(cublasStatus_t status, std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    return ResourceExhaustedError("{}: cuBLAS could not allocate GPU memory", what);
  }
  return InternalError("{}: {}", what, cublasGetStatusString(status));
}

StatusOr<cublasHandle_t> CublasHandleForCurrentDevice() {
  thread_local ThreadHandles handles;
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return InternalError("cudaGetDevice: {}", cudaGetErrorString(err));
  }
  cublasHandle_t& handle = handles.For(device);
  if (handle == nullptr) {
    cublasHandle_t created = nullptr;
    FZ_RETURN_IF_ERROR(CublasStatus(cublasCreate(&created), "cublasCreate"));
    // Default math mode: f32 GEMMs stay full f32 (no TF32), the contract of the CPU reference.
    FZ_RETURN_IF_ERROR(
        CublasStatus(cublasSetStream(created, CurrentFramezipStream()), "cublasSetStream"));
    handle = created;
  }
  return handle;
}

}  // namespace framezip::engine::ops
