// Per query head, blocks of probe rows go through one sgemm against the keys they can see, an
// exact two-pass softmax per row, and a column sum into that head's accumulator; the heads of a
// group are summed at the end (in f64, then stored f32).
#include "engine/compress/probe_scoring.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/zipvl_cuda.h"

namespace framezip::engine::compress {
namespace {

constexpr int64_t kProbeBlock = 32;

}  // namespace

std::vector<int32_t> SelectProbes(int64_t n, int64_t recent, int64_t random, uint64_t seed) {
  std::vector<int32_t> probes;
  if (n <= 0) return probes;
  if (n <= recent + random) {
    probes.resize(static_cast<size_t>(n));
    std::iota(probes.begin(), probes.end(), 0);
    return probes;
  }
  const int64_t rest = n - recent;  // candidates for the random probes: [0, rest)
  // Floyd's algorithm: `random` distinct values from [0, rest) in O(random) draws.
  std::mt19937_64 rng(seed);
  std::vector<int32_t> picked;
  for (int64_t j = rest - random; j < rest; ++j) {
    const int64_t t = std::uniform_int_distribution<int64_t>(0, j)(rng);
    const bool seen = std::find(picked.begin(), picked.end(), t) != picked.end();
    picked.push_back(static_cast<int32_t>(seen ? j : t));
  }
  probes = std::move(picked);
  for (int64_t i = rest; i < n; ++i) probes.push_back(static_cast<int32_t>(i));
  std::sort(probes.begin(), probes.end());
  return probes;
}

StatusOr<ProbeScores> ScoreProbes(const float* q, const float* k, int64_t n,
                                  std::span<const int32_t> probes, const ProbeScoringParams& p) {
  if (p.heads <= 0 || p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.head_dim <= 0) {
    return InvalidArgumentError("ScoreProbes: {} heads, {} KV heads, head_dim {}", p.heads,
                                p.kv_heads, p.head_dim);
  }
  for (size_t i = 0; i < probes.size(); ++i) {
    if (probes[i] < 0 || probes[i] >= n || (i > 0 && probes[i] <= probes[i - 1])) {
      return InvalidArgumentError("ScoreProbes: probes must be sorted, distinct and in [0, {})", n);
    }
  }
  const int64_t heads = p.heads, d = p.head_dim, rep = p.heads / p.kv_heads;
  const int64_t np = static_cast<int64_t>(probes.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  ops::cpu::EnsureBlasSingleThreaded();

  // acc[h][j]: Σ over probes of head h's attention on token j.
  std::vector<std::vector<float>> acc(static_cast<size_t>(heads),
                                      std::vector<float>(static_cast<size_t>(n), 0.f));
  const int64_t blocks = (np + kProbeBlock - 1) / kProbeBlock;
  // Tasks are (head, probe block); each block writes its own partial row so tasks never share
  // an accumulator, then partials of one head are added in block order (deterministic).
  std::vector<std::vector<float>> partial(static_cast<size_t>(heads * blocks));
  ComputePool().ParallelFor(heads * blocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> qb(static_cast<size_t>(kProbeBlock * d));
    std::vector<float> s;
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task / blocks, b = task % blocks, g = h / rep;
      const int64_t i0 = b * kProbeBlock, m = std::min(kProbeBlock, np - i0);
      const int64_t keys = probes[static_cast<size_t>(i0 + m - 1)] + 1;  // the last probe's view
      for (int64_t r = 0; r < m; ++r) {
        const float* src =
            q + (static_cast<int64_t>(probes[static_cast<size_t>(i0 + r)]) * heads + h) * d;
        std::copy(src, src + d, qb.data() + r * d);
      }
      s.resize(static_cast<size_t>(m * keys));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                  static_cast<int>(keys), static_cast<int>(d), scale, qb.data(),
                  static_cast<int>(d), k + g * d, static_cast<int>(p.kv_heads * d), 0.f, s.data(),
                  static_cast<int>(keys));
      std::vector<float>& out = partial[static_cast<size_t>(task)];
      out.assign(static_cast<size_t>(keys), 0.f);
      for (int64_t r = 0; r < m; ++r) {
        const int64_t visible = probes[static_cast<size_t>(i0 + r)] + 1;  // causal mask
        float* row = s.data() + r * keys;
        const float mx = *std::max_element(row, row + visible);
        const float sum = ops::cpu::ExpShiftSum(row, visible, mx);
        ops::cpu::Axpy(1.0f / sum, row, visible, out.data());
      }
    }
  });
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t b = 0; b < blocks; ++b) {
      const std::vector<float>& part = partial[static_cast<size_t>(h * blocks + b)];
      ops::cpu::Axpy(1.f, part.data(), static_cast<int64_t>(part.size()),
                     acc[static_cast<size_t>(h)].data());
    }
  }

  ProbeScores out;
  out.groups = p.per_kv_head ? p.kv_heads : 1;
  out.n = n;
  out.a.assign(static_cast<size_t>(out.groups * n), 0.f);
  out.a_norm.assign(out.a.size(), 0.f);
  out.counts.assign(static_cast<size_t>(n), 0);
  // c_j = probes at or after j: a backward sweep over the sorted probes.
  int64_t at = np;
  for (int64_t j = n - 1; j >= 0; --j) {
    while (at > 0 && probes[static_cast<size_t>(at - 1)] >= j) --at;
    out.counts[static_cast<size_t>(j)] = static_cast<int32_t>(np - at);
  }
  const int64_t heads_per_group = heads / out.groups;
  for (int g = 0; g < out.groups; ++g) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t h = g * heads_per_group; h < (g + 1) * heads_per_group; ++h) {
        sum += acc[static_cast<size_t>(h)][static_cast<size_t>(j)];
      }
      const size_t idx = static_cast<size_t>(g * n + j);
      out.a[idx] = static_cast<float>(sum);
      const int32_t c = out.counts[static_cast<size_t>(j)];
      out.a_norm[idx] = c > 0 ? static_cast<float>(sum / c) : 0.f;
    }
  }
  return out;
}

StatusOr<ProbeScores> ScoreProbes(const Tensor& q, const Tensor& k, std::span<const int32_t> probes,
                                  bool per_kv_head) {
  if (q.rank() != 3 || k.rank() != 3 || q.dim(0) != k.dim(0) || q.dim(2) != k.dim(2) ||
      q.dtype() != DType::kF32 || k.dtype() != DType::kF32 || q.device() != k.device()) {
    return InvalidArgumentError(
        "ScoreProbes: want q [n, H, d] and k [n, G, d] f32 on one device; "
        "got q {} and k {}",
        ShapeString(q.shape()), ShapeString(k.shape()));
  }
  const int64_t n = q.dim(0);
  if (q.device().is_cpu()) {
    return ScoreProbes(q.data<float>(), k.data<float>(), n, probes,
                       ProbeScoringParams{static_cast<int>(q.dim(1)), static_cast<int>(k.dim(1)),
                                          static_cast<int>(q.dim(2)), per_kv_head});
  }
  ProbeScores scores;
  scores.groups = per_kv_head ? static_cast<int>(k.dim(1)) : 1;
  scores.n = n;
  FZ_ASSIGN_OR_RETURN(Tensor a, Tensor::Empty({scores.groups, n}, DType::kF32, q.device()));
  FZ_ASSIGN_OR_RETURN(Tensor a_norm, Tensor::Empty({scores.groups, n}, DType::kF32, q.device()));
  FZ_ASSIGN_OR_RETURN(Tensor counts, Tensor::Empty({n}, DType::kI32, q.device()));
  FZ_RETURN_IF_ERROR(ops::ProbeScoresCuda(q, k, probes, per_kv_head, a, a_norm, counts));
  FZ_ASSIGN_OR_RETURN(const Tensor host_a, a.To(Device::Cpu()));
  FZ_ASSIGN_OR_RETURN(const Tensor host_norm, a_norm.To(Device::Cpu()));
  FZ_ASSIGN_OR_RETURN(const Tensor host_counts, counts.To(Device::Cpu()));
  scores.a.assign(host_a.data<float>(), host_a.data<float>() + host_a.numel());
  scores.a_norm.assign(host_norm.data<float>(), host_norm.data<float>() + host_norm.numel());
  scores.counts.assign(host_counts.data<int32_t>(), host_counts.data<int32_t>() + n);
  return scores;
}

}  // namespace framezip::engine::compress
