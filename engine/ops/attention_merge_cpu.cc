// MergeAttentionParts and AttentionTokenShares on the CPU: the reference arithmetic of the GPU
// kernels (engine/kernels/cuda/low_rank.cu), head by head. Both are O(P·H·d) or O(H·T), a small
// part of the attention they merge, so they run on the calling thread.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::ops {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

Status MergeAttentionPartsCpu(const Tensor& base, const Tensor& base_lse, const Tensor& part_max,
                              const Tensor& part_sum, const Tensor& part_out, Tensor& out,
                              Tensor& total_max, Tensor& total_sum) {
  const int64_t heads = base.dim(0), d = base.dim(1), parts = part_max.dim(0);
  const float* lse = base_lse.data<float>();
  const float* pmax = part_max.data<float>();
  const float* psum = part_sum.data<float>();
  const float* pout = part_out.data<float>();
  for (int64_t h = 0; h < heads; ++h) {
    float m = lse[h];
    for (int64_t p = 0; p < parts; ++p) {
      if (psum[p * heads + h] > 0.f) m = std::max(m, pmax[p * heads + h]);
    }
    const float base_weight = (m == kNegInf || lse[h] == kNegInf) ? 0.f : std::exp(lse[h] - m);
    float s = base_weight;
    // The base first: `out` may be `base`, and its row is scaled in place before the parts add.
    float* o = out.data<float>() + h * d;
    const float* b = base.data<float>() + h * d;
    for (int64_t c = 0; c < d; ++c) o[c] = base_weight * b[c];
    for (int64_t p = 0; p < parts; ++p) {
      const float sum = psum[p * heads + h];
      if (!(sum > 0.f)) continue;
      const float f = std::exp(pmax[p * heads + h] - m);
      s += f * sum;
      cpu::Axpy(f, pout + (p * heads + h) * d, d, o);
    }
    if (s > 0.f) {
      cpu::Scale(1.f / s, d, o);
    } else {
      std::fill_n(o, d, 0.f);
    }
    total_max.data<float>()[h] = m;
    total_sum.data<float>()[h] = s;
  }
  return absl::OkStatus();
}

Status AttentionTokenSharesCpu(const Tensor& weights, const Tensor& part_max,
                               const Tensor& total_max, const Tensor& total_sum, Tensor& probs) {
  const int64_t heads = weights.dim(0), tokens = weights.dim(1);
  float* p = probs.data<float>();
  std::fill_n(p, tokens, 0.f);
  for (int64_t h = 0; h < heads; ++h) {
    const float s = total_sum.data<float>()[h];
    if (!(s > 0.f)) continue;
    const float f = std::exp(part_max.data<float>()[h] - total_max.data<float>()[h]) /
                    (s * static_cast<float>(heads));
    cpu::Axpy(f, weights.data<float>() + h * tokens, tokens, p);
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
