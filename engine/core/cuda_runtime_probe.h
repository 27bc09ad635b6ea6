// Asks the CUDA runtime, once per process, how many GPUs it can use. The only translation units
// that know whether CUDA is compiled in are cuda_runtime_probe_{cuda.cc,none.cc}: CMake picks one.
#pragma once

#include <string>

namespace framezip::engine {

struct CudaRuntimeInfo {
  bool built_with_cuda = false;
  int device_count = 0;
  std::string reason;  // why device_count is 0; empty otherwise
};

// Thread-safe; the probe runs on first use.
const CudaRuntimeInfo& ProbeCudaRuntime();

}  // namespace framezip::engine
