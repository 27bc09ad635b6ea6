// LayerNorm on the CPU: one row per loop iteration, rows spread over ComputePool().
#include <cmath>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::ops {
namespace {

std::vector<float> ParamF32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  cpu::ToF32(t.raw_data(), t.dtype(), t.numel(), out.data());
  return out;
}

}  // namespace

Status LayerNormCpu(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                    Tensor& y) {
  const int64_t d = x.dim(-1), rows = x.numel() / d;
  const std::vector<float> g = ParamF32(gamma);
  const std::vector<float> b = beta.defined() ? ParamF32(beta) : std::vector<float>(d, 0.f);
  const float* xp = static_cast<const float*>(x.raw_data());
  float* yp = static_cast<float*>(y.raw_data());
  ComputePool().ParallelFor(rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = xp + r * d;
      float* yr = yp + r * d;
      // Two passes (mean, then centred variance) avoid E[x²]−E[x]² cancellation; the centred
      // row is staged in y, and both sums go through the vectorised kernels.
      const float mean = cpu::Sum(xr, d) / static_cast<float>(d);
      for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] - mean;
      const float var = cpu::Dot(yr, yr, d) / static_cast<float>(d);
      const float inv = 1.0f / std::sqrt(var + eps);
      for (int64_t i = 0; i < d; ++i) yr[i] = yr[i] * inv * g[i] + b[i];
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
