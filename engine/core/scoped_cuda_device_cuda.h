// Makes a CUDA device current for a scope and restores the previous one (for *_cuda.cc files in
// engine/core only; it includes the CUDA runtime). docs/DEVELOPING.md §4: the device is chosen in
// scoped guards, never as a lasting global change.
#pragma once

#include <cuda_runtime_api.h>

namespace framezip::engine {

class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(int index) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (index != previous_) cudaSetDevice(index);
  }
  ~ScopedCudaDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace framezip::engine
