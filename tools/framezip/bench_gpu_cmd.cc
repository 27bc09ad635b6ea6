// framezip bench gpu: the suite lives in bench/gpu (so the GPU-check build can run it without the
// CLI's gRPC/FFmpeg dependencies); in builds without CUDA it answers with a clear error.
#include "bench/gpu/gpu_bench.h"
#include "tools/framezip/subcommands.h"

namespace framezip::cli {

int RunBenchGpu(const std::vector<std::string>& args) { return benchgpu::RunGpuBench(args); }

}  // namespace framezip::cli
