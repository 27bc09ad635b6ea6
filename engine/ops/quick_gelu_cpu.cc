#include <cmath>

#include "engine/core/thread_pool.h"
#include "engine/ops/quick_gelu_backends.h"

namespace framezip::engine::ops {

Status QuickGeluCpu(const Tensor& x, Tensor& y) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  // x · sigmoid(1.702x) written as x / (1 + e^(-1.702x)), as torch's x * torch.sigmoid(1.702 * x);
  // for x -> -inf the denominator overflows to inf and the result is -0, not NaN.
  ComputePool().ParallelFor(x.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = in[i] / (1.0f + std::exp(-1.702f * in[i]));
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
