// Direct loops: each row's key set is at most sinks + window keys (dozens), too small for the
// blocked attention kernel to pay off, and the rows are independent, so they are spread over the
// compute pool. The dot products, softmax and weighted sums run on the dispatched kernels
// (cpu_kernels.h: AVX-512 or AVX2).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/attention_local_backends.h"
#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::ops {

Status LocalWindowAttentionCpu(const Tensor& q, const Tensor& k, const Tensor& v,
                               const float* past_k, const float* past_v, int64_t past,
                               std::span<const int32_t> rows, int64_t h0, int64_t nh,
                               const LocalWindow& params, Tensor& out) {
  const int64_t heads = q.dim(1), g = k.dim(1), d = q.dim(2);
  const int64_t rep = heads / g;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* qd = q.data<float>();
  const float* kd = k.data<float>();
  const float* vd = v.data<float>();
  float* od = out.data<float>();
  // Key j of the layer's sequence (earlier chunks, then this chunk), KV head kvh.
  auto key = [&](int64_t j, int64_t kvh) {
    return j < past ? past_k + (j * g + kvh) * d : kd + ((j - past) * g + kvh) * d;
  };
  auto value = [&](int64_t j, int64_t kvh) {
    return j < past ? past_v + (j * g + kvh) * d : vd + ((j - past) * g + kvh) * d;
  };
  const int64_t n = static_cast<int64_t>(rows.size());
  ComputePool().ParallelFor(n, 16, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> keys;
    std::vector<float> s;
    std::vector<float> acc(static_cast<size_t>(d));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = rows[static_cast<size_t>(r)];
      const int64_t p = past + i;
      const int64_t lo = std::max<int64_t>(0, p - params.window + 1);
      keys.clear();
      for (int64_t j = 0; j < std::min(params.sinks, lo); ++j) keys.push_back(j);
      for (int64_t j = lo; j <= p; ++j) keys.push_back(j);
      s.resize(keys.size());
      for (int64_t h = h0; h < h0 + nh; ++h) {
        const int64_t kvh = h / rep;
        const float* qi = qd + (i * heads + h) * d;
        for (size_t jj = 0; jj < keys.size(); ++jj) {
          s[jj] = cpu::Dot(qi, key(keys[jj], kvh), d) * scale;
        }
        const int64_t nk = static_cast<int64_t>(keys.size());
        const float inv_sum = 1.f / cpu::ExpShiftSum(s.data(), nk, cpu::Max(s.data(), nk));
        std::fill(acc.begin(), acc.end(), 0.f);
        for (size_t jj = 0; jj < keys.size(); ++jj) {
          cpu::Axpy(s[jj] * inv_sum, value(keys[jj], kvh), d, acc.data());
        }
        std::copy(acc.begin(), acc.end(), od + (i * heads + h) * d);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
