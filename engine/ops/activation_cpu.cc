// Element-wise activations on the CPU, split into contiguous chunks over ComputePool().
#include <cmath>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"

namespace framezip::engine::ops {
namespace {

constexpr int64_t kGrain = 1 << 14;

template <typename F>
void ForEachChunk(int64_t n, F&& f) {
  ComputePool().ParallelFor(n, kGrain, [&](int64_t b, int64_t e) { f(b, e); });
}

}  // namespace

Status GeluCpu(const Tensor& x, GeluApproximation approximation, Tensor& y) {
  const float* xp = static_cast<const float*>(x.raw_data());
  float* yp = static_cast<float*>(y.raw_data());
  if (approximation == GeluApproximation::kErf) {
    ForEachChunk(x.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        yp[i] = 0.5f * xp[i] * (1.0f + std::erf(xp[i] * 0.70710678118654752f));
      }
    });
  } else {
    constexpr float kBeta = 0.79788456080286536f;  // sqrt(2/pi)
    ForEachChunk(x.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float v = xp[i];
        yp[i] = 0.5f * v * (1.0f + std::tanh(kBeta * (v + 0.044715f * v * v * v)));
      }
    });
  }
  return absl::OkStatus();
}

Status SiluMulCpu(const Tensor& gate, const Tensor& up, Tensor& y) {
  const float* g = static_cast<const float*>(gate.raw_data());
  const float* u = static_cast<const float*>(up.raw_data());
  float* yp = static_cast<float*>(y.raw_data());
  ForEachChunk(gate.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) yp[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  });
  return absl::OkStatus();
}

Status AddCpu(const Tensor& a, const Tensor& b, Tensor& y) {
  const float* ap = static_cast<const float*>(a.raw_data());
  const float* bp = static_cast<const float*>(b.raw_data());
  float* yp = static_cast<float*>(y.raw_data());
  ForEachChunk(a.numel(), [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) yp[i] = ap[i] + bp[i];
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
