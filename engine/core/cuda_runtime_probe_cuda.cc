// Compiled when the CUDA backend is built; links the CUDA runtime.
#include <cuda_runtime_api.h>

#include "engine/core/cuda_runtime_probe.h"
#include "fmt/format.h"

namespace framezip::engine {

const CudaRuntimeInfo& ProbeCudaRuntime() {
  static const CudaRuntimeInfo info = [] {
    CudaRuntimeInfo result{true, 0, ""};
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      result.reason = fmt::format("CUDA runtime: {}", cudaGetErrorString(err));
      cudaGetLastError();  // clear the error so later calls start clean
    } else if (count == 0) {
      result.reason = "no CUDA device present";
    } else {
      result.device_count = count;
    }
    return result;
  }();
  return info;
}

}  // namespace framezip::engine
