#include <cmath>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"

namespace framezip::engine::ops {

void RotateHalfSplitRows(float* xp, int64_t tokens, int64_t heads, int64_t d,
                         const int32_t* pos, const RopeParams& params, float sign) {
  const int64_t half = d / 2;
  const std::vector<float> inv = RopeInverseFrequencies(params);
  ComputePool().ParallelFor(tokens, 4, [&](int64_t t0, int64_t t1) {
    std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        // f32 product as HF (position_ids.float() @ inv_freq), then cos/sin of that f32 value.
        const float f = static_cast<float>(pos[t]) * inv[i];
        c[i] = static_cast<float>(std::cos(static_cast<double>(f)));
        s[i] = sign * static_cast<float>(std::sin(static_cast<double>(f)));
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = xp + (t * heads + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * c[i] - b * s[i];
          v[i + half] = b * c[i] + a * s[i];
        }
      }
    }
  });
}

Status ApplyRopeCpu(Tensor& x, const Tensor& positions, const RopeParams& params) {
  RotateHalfSplitRows(x.data<float>(), x.dim(0), x.dim(1), x.dim(2), positions.data<int32_t>(),
                      params);
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
