// Helpers shared by the x_cuda.cc adapters only (it includes the CUDA runtime, so no other file
// may include it): cudaError_t to Status, dtype to kernel FloatKind, host int32 uploads,
// current-device scope.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"
#include "engine/core/cuda_status_cuda.h"
#include "engine/core/cuda_stream_cuda.h"
#include "engine/core/device_memory.h"
#include "engine/core/step_counters.h"
#include "engine/core/tensor.h"
#include "engine/kernels/cuda/cast.cuh"
#include "engine/kernels/cuda/elementwise.cuh"

namespace framezip::engine::ops {

// RESOURCE_EXHAUSTED for out-of-memory, INTERNAL otherwise, naming the op; a sticky error (illegal
// address, launch failure, ...) also marks the device unhealthy (engine/core/cuda_error_class.h).
inline Status CudaStatus(cudaError_t err, std::string_view op) {
  return CudaErrorToStatus(err, op);
}

// CudaStatus of a kernel launcher's result, counting `kernels` launches (step_counters.h).
inline Status LaunchStatus(cudaError_t err, std::string_view op, int64_t kernels = 1) {
  CountLaunches(kernels);
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

// y [m, n] f32 += bias [n] (f32/bf16/f16) on every row: Linear's bias after a GEMM that wrote y.
inline Status AddBiasRows(const Tensor& bias, int64_t m, int64_t n, Tensor& y) {
  cuda::AddBiasParams p;
  p.y = static_cast<float*>(y.raw_data());
  p.bias = bias.raw_data();
  p.bias_kind = KindOf(bias.dtype());
  p.rows = m;
  p.n = n;
  return LaunchStatus(cuda::LaunchAddBias(p, CurrentFramezipStream()), "Linear (bias)");
}

// A device copy of host int32s (row lists, key prefixes, probe positions) for one launch; an
// empty span gives an empty tensor. Freed by the caller after the launch: the stream-ordered
// caching allocator reuses it only for later work on the same stream.
inline StatusOr<Tensor> DeviceI32(std::span<const int32_t> host, Device device) {
  FZ_ASSIGN_OR_RETURN(Tensor t,
                      Tensor::Empty({static_cast<int64_t>(host.size())}, DType::kI32, device));
  if (!host.empty()) {
    FZ_RETURN_IF_ERROR(CopyBytes(t.raw_data(), device, host.data(), Device::Cpu(), t.nbytes()));
  }
  return t;
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
