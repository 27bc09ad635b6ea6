// Decode attention over KV spans on the CPU: one task per (sequence, KV head); the query heads of
// that group share every K/V row load. Online softmax across spans; within a span scores are
// computed for the whole span first (a page is at most a few dozen tokens).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::ops {

Status PagedDecodeAttentionCpu(const Tensor& q, std::span<const KvSpan> spans,
                               std::span<const int32_t> span_offsets,
                               const PagedDecodeParams& params, Tensor& out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t batch = q.dim(0), heads = q.dim(1), d = q.dim(2);
  const int64_t groups = params.num_kv_heads, rep = heads / groups;
  const float scale = params.scale > 0 ? params.scale : 1.0f / std::sqrt(static_cast<float>(d));
  const size_t elem = DTypeSize(params.kv_dtype);
  const float* qp = q.data<float>();
  float* op = out.data<float>();

  ComputePool().ParallelFor(batch * groups, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> kf, vf, s;
    std::vector<float> acc(static_cast<size_t>(rep * d)), m(rep), l(rep);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t b = task / groups, g = task % groups;
      const float* qg = qp + (b * heads + g * rep) * d;
      std::fill(acc.begin(), acc.end(), 0.f);
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.f);
      for (int32_t si = span_offsets[b]; si < span_offsets[b + 1]; ++si) {
        const KvSpan& span = spans[si];
        const int64_t nt = span.num_tokens;
        if (nt == 0) continue;
        kf.resize(static_cast<size_t>(nt * d));
        vf.resize(static_cast<size_t>(nt * d));
        s.resize(static_cast<size_t>(nt));
        for (int64_t t = 0; t < nt; ++t) {
          const size_t off = static_cast<size_t>((t * groups + g) * d) * elem;
          cpu::ToF32(static_cast<const char*>(span.k) + off, params.kv_dtype, d, &kf[t * d]);
          cpu::ToF32(static_cast<const char*>(span.v) + off, params.kv_dtype, d, &vf[t * d]);
        }
        for (int64_t r = 0; r < rep; ++r) {
          for (int64_t t = 0; t < nt; ++t) s[t] = scale * cpu::Dot(qg + r * d, &kf[t * d], d);
          const float m_new = std::max(m[r], *std::max_element(s.begin(), s.end()));
          const float corr = m[r] == kNegInf ? 0.f : std::exp(m[r] - m_new);
          l[r] = l[r] * corr + cpu::ExpShiftSum(s.data(), nt, m_new);
          m[r] = m_new;
          float* a = acc.data() + r * d;
          if (corr != 1.f) cpu::Scale(corr, d, a);
          for (int64_t t = 0; t < nt; ++t) cpu::Axpy(s[t], &vf[t * d], d, a);
        }
      }
      for (int64_t r = 0; r < rep; ++r) {
        float* o = op + (b * heads + g * rep + r) * d;
        const float inv = l[r] > 0 ? 1.f / l[r] : 0.f;
        for (int64_t i = 0; i < d; ++i) o[i] = acc[r * d + i] * inv;
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
