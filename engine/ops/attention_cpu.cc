// Blocked (FlashAttention-style) attention on the CPU. Each task owns one (batch, query head,
// block of kBlockQ queries) and streams over key blocks of kBlockK: S = scale·Q·Kᵀ (sgemm),
// causal mask on the diagonal block, online-softmax update of the running max m and sum l, and
// O += P·V (sgemm). Per-thread memory is kBlockQ·(kBlockK + d) floats whatever the length.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::ops {
namespace {

constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockK = 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

Status AttentionCpu(const Tensor& q, const Tensor& k, const Tensor& v,
                    const AttentionParams& params, Tensor& out) {
  const int64_t batch = q.dim(0), tq = q.dim(1), heads = q.dim(2), d = q.dim(3);
  const int64_t tk = k.dim(1), kv_heads = k.dim(2);
  const int64_t rep = heads / kv_heads;
  const float scale = params.scale > 0 ? params.scale : 1.0f / std::sqrt(static_cast<float>(d));
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  float* op = out.data<float>();
  const int64_t q_blocks = (tq + kBlockQ - 1) / kBlockQ;
  const int ldq = static_cast<int>(heads * d), ldk = static_cast<int>(kv_heads * d);
  cpu::EnsureBlasSingleThreaded();

  ComputePool().ParallelFor(batch * heads * q_blocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> s(static_cast<size_t>(kBlockQ * kBlockK));
    std::vector<float> acc(static_cast<size_t>(kBlockQ * d));
    std::vector<float> m(kBlockQ), l(kBlockQ);
    for (int64_t task = t0; task < t1; ++task) {
      // Query blocks vary fastest, then heads, so neighbouring tasks share K/V in cache.
      const int64_t qb = task % q_blocks, h = (task / q_blocks) % heads,
                    b = task / (q_blocks * heads);
      const int64_t g = h / rep;
      const int64_t i0 = qb * kBlockQ, mq = std::min(kBlockQ, tq - i0);
      const float* qt = qp + ((b * tq + i0) * heads + h) * d;
      const float* kb = kp + (b * tk * kv_heads + g) * d;
      const float* vb = vp + (b * tk * kv_heads + g) * d;
      // Keys row r may see: [0, visible(r)).
      auto visible = [&](int64_t r) -> int64_t {
        if (params.key_limit != nullptr) return std::min<int64_t>(tk, params.key_limit[i0 + r]);
        return params.causal ? std::min(tk, i0 + r + params.q_offset + 1) : tk;
      };
      int64_t kend = 0;
      for (int64_t r = 0; r < mq; ++r) kend = std::max(kend, visible(r));
      std::fill(acc.begin(), acc.end(), 0.f);
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.f);
      for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
        const int64_t nk = std::min(kBlockK, kend - j0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(mq),
                    static_cast<int>(nk), static_cast<int>(d), scale, qt, ldq, kb + j0 * ldk, ldk,
                    0.f, s.data(), static_cast<int>(kBlockK));
        for (int64_t r = 0; r < mq; ++r) {
          float* sr = s.data() + r * kBlockK;
          for (int64_t c = std::max<int64_t>(0, visible(r) - j0); c < nk; ++c) sr[c] = kNegInf;
          const float block_max = cpu::Max(sr, nk);
          const float m_new = std::max(m[r], block_max);
          if (m_new == kNegInf) {  // nothing visible yet in this row
            std::fill(sr, sr + nk, 0.f);
            continue;
          }
          const float corr = m[r] == kNegInf ? 0.f : std::exp(m[r] - m_new);
          l[r] = l[r] * corr + cpu::ExpShiftSum(sr, nk, m_new);
          m[r] = m_new;
          if (corr != 1.f) cpu::Scale(corr, d, acc.data() + r * d);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(mq),
                    static_cast<int>(d), static_cast<int>(nk), 1.f, s.data(),
                    static_cast<int>(kBlockK), vb + j0 * ldk, ldk, 1.f, acc.data(),
                    static_cast<int>(d));
      }
      for (int64_t r = 0; r < mq; ++r) {
        float* o = op + ((b * tq + i0 + r) * heads + h) * d;
        const float inv = l[r] > 0 ? 1.f / l[r] : 0.f;
        for (int64_t i = 0; i < d; ++i) o[i] = acc[r * d + i] * inv;
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
