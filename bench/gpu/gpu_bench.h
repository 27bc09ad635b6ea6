// `framezip bench gpu [--json] [--quick]`: the GPU's ceilings (device copy GB/s, cuBLAS bf16
// GEMM TFLOP/s), then our kernels against them: dense causal prefill attention at 4k/16k/32k
// tokens (head dim 64 and 128, TFLOP/s), ZipVL sparse prefill vs our dense at the same sizes
// (τ = 0.975), and split-K decode attention at 32k context over f16, int4, int2 and mixed
// int4/int2 pages (GB/s of bytes read against the copy ceiling). cudaEvent timing after a
// warm-up, median of repeats. Also the standalone `framezip_bench_gpu` (scripts/gpu-check.sh).
#pragma once

#include <string>
#include <vector>

namespace framezip::benchgpu {

// Returns the exit code: 0 ok, 1 a CUDA failure, 2 usage error or no CUDA (in builds without it,
// gpu_bench_unavailable.cc says so).
int RunGpuBench(const std::vector<std::string>& args);

}  // namespace framezip::benchgpu
