#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/rope_table.h"

namespace framezip::engine::ops {

void RotateHalfSplitRows(float* xp, int64_t tokens, int64_t heads, int64_t d, const int32_t* pos,
                         const RopeParams& params, float sign) {
  const int64_t half = d / 2;
  int32_t min_pos = 0, max_pos = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    min_pos = std::min(min_pos, pos[t]);
    max_pos = std::max(max_pos, pos[t]);
  }
  // The shared table's angles; where it cannot hold these positions, each token's own.
  const std::shared_ptr<const RopeTable> table =
      min_pos < 0 ? nullptr : RopeTable::For(params, int64_t{max_pos} + 1);
  const std::vector<float> inv = table ? std::vector<float>() : RopeInverseFrequencies(params);
  ComputePool().ParallelFor(tokens, 4, [&](int64_t t0, int64_t t1) {
    std::vector<float> own_c, own_s;
    for (int64_t t = t0; t < t1; ++t) {
      const float* c = nullptr;
      const float* s = nullptr;
      if (table) {
        c = table->cos(pos[t]);
        s = table->sin(pos[t]);
      } else {
        own_c.resize(static_cast<size_t>(half));
        own_s.resize(static_cast<size_t>(half));
        for (int64_t i = 0; i < half; ++i) {
          const float f = static_cast<float>(pos[t]) * inv[i];
          own_c[i] = static_cast<float>(std::cos(static_cast<double>(f)));
          own_s[i] = static_cast<float>(std::sin(static_cast<double>(f)));
        }
        c = own_c.data();
        s = own_s.data();
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = xp + (t * heads + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half], si = sign * s[i];
          v[i] = a * c[i] - b * si;
          v[i + half] = b * c[i] + a * si;
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
