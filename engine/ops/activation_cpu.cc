// Element-wise activations on the CPU, split into contiguous chunks over ComputePool(); the
// transcendental ones run the vectorised loops of cpu_kernels.h.
#include <algorithm>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"

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
  ForEachChunk(x.numel(), [&](int64_t b, int64_t e) {
    if (approximation == GeluApproximation::kErf) {
      cpu::GeluErf(xp + b, e - b, yp + b);
    } else {
      cpu::GeluTanh(xp + b, e - b, yp + b);
    }
  });
  return absl::OkStatus();
}

Status SiluMulCpu(const Tensor& gate, const Tensor& up, Tensor& y) {
  const float* g = static_cast<const float*>(gate.raw_data());
  const float* u = static_cast<const float*>(up.raw_data());
  float* yp = static_cast<float*>(y.raw_data());
  ForEachChunk(gate.numel(),
               [&](int64_t b, int64_t e) { cpu::SiluMul(g + b, u + b, e - b, yp + b); });
  return absl::OkStatus();
}

Status SiluMulHalvesCpu(const Tensor& gate_up, Tensor& y) {
  const int64_t w = y.dim(1);
  const float* in = static_cast<const float*>(gate_up.raw_data());
  float* yp = static_cast<float*>(y.raw_data());
  // The chunks SiluMul takes over y, each walked row piece by row piece.
  ForEachChunk(y.numel(), [&](int64_t b, int64_t e) {
    while (b < e) {
      const int64_t r = b / w, c = b % w, n = std::min(e - b, w - c);
      const float* gate = in + r * 2 * w + c;
      cpu::SiluMul(gate, gate + w, n, yp + b);
      b += n;
    }
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
