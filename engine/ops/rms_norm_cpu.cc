// RMSNorm on the CPU: one row per loop iteration, rows spread over ComputePool().
#include <cmath>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::ops {

Status RmsNormCpu(const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  const int64_t d = x.dim(-1), rows = x.numel() / d;
  std::vector<float> w(static_cast<size_t>(weight.numel()));
  cpu::ToF32(weight.raw_data(), weight.dtype(), weight.numel(), w.data());
  const float* xp = static_cast<const float*>(x.raw_data());
  float* yp = static_cast<float*>(y.raw_data());
  ComputePool().ParallelFor(rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = xp + r * d;
      float* yr = yp + r * d;
      const float ms = cpu::Dot(xr, xr, d) / static_cast<float>(d);
      const float inv = 1.0f / std::sqrt(ms + eps);
      for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv * w[i];
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
