// framezip_bench_gpu: `framezip bench gpu` as its own small binary, for the GPU-check build
// (scripts/gpu-check.sh), which has no gRPC/FFmpeg and so no framezip CLI.
#include <string>
#include <vector>

#include "bench/gpu/gpu_bench.h"

int main(int argc, char** argv) {
  return framezip::benchgpu::RunGpuBench(std::vector<std::string>(argv + 1, argv + argc));
}
