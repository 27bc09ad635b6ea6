// Helpers shared by the x_cuda.cc adapters only (it includes the CUDA runtime, so no other file
// may include it): cudaError_t to Status, dtype to kernel FloatKind, current-device scope.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "common/status.h"
#include "engine/core/cuda_status_cuda.h"
#include "engine/core/tensor.h"
#include "engine/kernels/cuda/cast.cuh"

namespace framezip::engine::ops {

// RESOURCE_EXHAUSTED for out-of-memory, INTERNAL otherwise, naming the op; a sticky error (illegal
// address, launch failure, ...) also marks the device unhealthy (engine/core/cuda_error_class.h).
inline Status CudaStatus(cudaError_t err, std::string_view op) {
  return CudaErrorToStatus(err, op);
}

inline cuda::FloatKind KindOf(DType t) {
  switch (t) {
    case DType::kF16:
      return cuda::FloatKind::kF16;
    case DType::kBF16:
      return cuda::FloatKind::kBF16;
    default:
      return cuda::FloatKind::kF32;
  }
}

// Makes `device` current for the scope, so launches and cuBLAS calls go to the tensors' GPU.
class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(Device device) {
    cudaGetDevice(&previous_);
    if (device.index != previous_) cudaSetDevice(device.index);
  }
  ~ScopedCudaDevice() { cudaSetDevice(previous_); }
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace framezip::engine::ops
