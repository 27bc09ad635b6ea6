// Compiled when the build has no CUDA backend (FRAMEZIP_CUDA=OFF or no nvcc found).
#include "engine/core/cuda_runtime_probe.h"

namespace framezip::engine {

const CudaRuntimeInfo& ProbeCudaRuntime() {
  static const CudaRuntimeInfo info{false, 0, "built without CUDA"};
  return info;
}

}  // namespace framezip::engine
