// `framezip bench gpu` in a build without CUDA: a clear error instead of the suite.
#include <cstdio>

#include "bench/gpu/gpu_bench.h"

namespace framezip::benchgpu {

int RunGpuBench(const std::vector<std::string>&) {
  std::fprintf(stderr,
               "framezip bench gpu: this binary was built without CUDA; rebuild with "
               "-DFRAMEZIP_CUDA=ON (nvcc on PATH or in /usr/local/cuda) and run it on a GPU\n");
  return 2;
}

}  // namespace framezip::benchgpu
