#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::ops {

Status SoftmaxCpu(const Tensor& x, Tensor& y) {
  const int64_t n = x.dim(-1), rows = x.numel() / std::max<int64_t>(n, 1);
  const float* xp = static_cast<const float*>(x.raw_data());
  float* yp = static_cast<float*>(y.raw_data());
  ComputePool().ParallelFor(rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* yr = yp + r * n;
      if (yr != xp + r * n) std::memcpy(yr, xp + r * n, static_cast<size_t>(n) * sizeof(float));
      const float max = n == 0 ? 0.f : cpu::Max(yr, n);
      if (max == -std::numeric_limits<float>::infinity()) {  // fully masked row
        std::fill(yr, yr + n, 0.f);
        continue;
      }
      const float sum = cpu::ExpShiftSum(yr, n, max);
      cpu::Scale(1.0f / sum, n, yr);
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
