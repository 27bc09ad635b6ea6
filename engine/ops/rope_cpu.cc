#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/rope_table.h"

namespace framezip::engine::ops {

namespace {

// Calls rotate(t0, t1, angles) over chunks of the tokens in parallel, where angles(t) gives token
// t's d/2 cosines and sines: the shared table's where it can hold these positions, else each
// token's own (computed as the table does).
template <typename Rotate>
void ForEachTokenAngles(int64_t tokens, const int32_t* pos, const RopeParams& params,
                        Rotate rotate) {
  const int64_t half = params.head_dim / 2;
  int32_t min_pos = 0, max_pos = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    min_pos = std::min(min_pos, pos[t]);
    max_pos = std::max(max_pos, pos[t]);
  }
  const std::shared_ptr<const RopeTable> table =
      min_pos < 0 ? nullptr : RopeTable::For(params, int64_t{max_pos} + 1);
  const std::vector<float> inv = table ? std::vector<float>() : RopeInverseFrequencies(params);
  ComputePool().ParallelFor(tokens, 4, [&](int64_t t0, int64_t t1) {
    std::vector<float> own_c, own_s;
    auto angles = [&](int64_t t) -> std::pair<const float*, const float*> {
      if (table) return {table->cos(pos[t]), table->sin(pos[t])};
      own_c.resize(static_cast<size_t>(half));
      own_s.resize(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i) {
        const float f = static_cast<float>(pos[t]) * inv[i];
        own_c[i] = static_cast<float>(std::cos(static_cast<double>(f)));
        own_s[i] = static_cast<float>(std::sin(static_cast<double>(f)));
      }
      return {own_c.data(), own_s.data()};
    };
    rotate(t0, t1, angles);
  });
}

// `heads` vectors of d rotated in place.
void RotateHeadsInPlace(float* x, int64_t heads, int64_t d, const float* c, const float* s,
                        float sign) {
  const int64_t half = d / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * d;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half], si = sign * s[i];
      v[i] = a * c[i] - b * si;
      v[i + half] = b * c[i] + a * si;
    }
  }
}

// The same arithmetic from `in` into `out`, which do not overlap (restrict: the loop vectorises
// without a runtime overlap check, which an in-place call would fail into the scalar loop).
void RotateHeadsInto(const float* __restrict in, float* __restrict out, int64_t heads, int64_t d,
                     const float* c, const float* s) {
  const int64_t half = d / 2;
  for (int64_t h = 0; h < heads; ++h) {
    const float* x = in + h * d;
    float* y = out + h * d;
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[i], b = x[i + half];
      y[i] = a * c[i] - b * s[i];
      y[i + half] = b * c[i] + a * s[i];
    }
  }
}

}  // namespace

void RotateHalfSplitRows(float* xp, int64_t tokens, int64_t heads, int64_t d, const int32_t* pos,
                         const RopeParams& params, float sign) {
  ForEachTokenAngles(tokens, pos, params, [&](int64_t t0, int64_t t1, auto& angles) {
    for (int64_t t = t0; t < t1; ++t) {
      const auto [c, s] = angles(t);
      RotateHeadsInPlace(xp + t * heads * d, heads, d, c, s, sign);
    }
  });
}

Status RopeSplitQkvCpu(const Tensor& qkv, const Tensor& positions, const RopeParams& params,
                       Tensor& q, Tensor& k, Tensor& v) {
  const int64_t q_heads = q.dim(1), kv_heads = k.dim(1), d = q.dim(2);
  const int64_t q_width = q_heads * d, kv_width = kv_heads * d, row = q_width + 2 * kv_width;
  const float* in = qkv.data<float>();
  float* qp = q.data<float>();
  float* kp = k.data<float>();
  float* vp = v.data<float>();
  ForEachTokenAngles(qkv.dim(0), positions.data<int32_t>(), params,
                     [&](int64_t t0, int64_t t1, auto& angles) {
                       for (int64_t t = t0; t < t1; ++t) {
                         const auto [c, s] = angles(t);
                         const float* x = in + t * row;
                         RotateHeadsInto(x, qp + t * q_width, q_heads, d, c, s);
                         RotateHeadsInto(x + q_width, kp + t * kv_width, kv_heads, d, c, s);
                         std::copy_n(x + q_width + kv_width, kv_width, vp + t * kv_width);
                       }
                     });
  return absl::OkStatus();
}

Status ApplyRopeCpu(Tensor& x, const Tensor& positions, const RopeParams& params) {
  RotateHalfSplitRows(x.data<float>(), x.dim(0), x.dim(1), x.dim(2), positions.data<int32_t>(),
                      params);
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
