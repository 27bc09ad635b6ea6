// UnfoldPatches on the CPU: one patch per task row, spread over the compute pool.
#include "engine/core/half.h"
#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"

namespace framezip::engine::ops {

Status UnfoldPatchesCpu(const Tensor& pixels, int64_t patch, DType round_to, Tensor& cols) {
  const int64_t c = pixels.dim(1), s = pixels.dim(2), p = patch, g = s / p, k = c * p * p;
  const float* px = pixels.data<float>();
  float* out = cols.data<float>();
  ComputePool().ParallelFor(cols.dim(0), 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (g * g), gy = (r / g) % g, gx = r % g;
      float* row = out + r * k;
      for (int64_t ch = 0; ch < c; ++ch) {
        for (int64_t ky = 0; ky < p; ++ky) {
          const float* src = px + ((b * c + ch) * s + gy * p + ky) * s + gx * p;
          for (int64_t kx = 0; kx < p; ++kx) {
            row[(ch * p + ky) * p + kx] = RoundedThrough(round_to, src[kx]);
          }
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
