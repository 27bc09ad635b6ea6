// [cuda]: ZipVL's GPU kernels on fresh random inputs.
//   * Probe scores (a, ã, c) against an f64 reference of compress/probe_scoring.h's definition
//     (the CPU ScoreProbes lives in engine/compress, outside the GPU-check build, so the
//     definition is restated here in f64): column sums of causal softmax rows, head-shared and per
//     KV head. f32 on the GPU with atomics: rel 1e-4 per element (abs floor 1e-6 of the largest).
//   * Top-p: count and the important set exactly equal to a restatement of compress/top_p.cc
//     (f64 prefix over the descending sort; ties by lower index), with planted ties.
//   * Sparse prefill over a given important set against the CPU ops::SparsePrefillAttention
//     (RestRows::kZero), abs 2e-5 + rel 1e-4 as dense attention; and the whole GPU step (scores,
//     top-p, sparse prefill) against the CPU op over the important set the GPU steps chose.
//   (SparsePrefillAttention itself, every rest-row mode, and the row moves under it,
//   ops::CopyRowSlices, run on every device: tests/unit/engine/ops/.)
#include "engine/ops/zipvl_cuda.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/ops/attention_sparse.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

std::vector<int32_t> RandomSortedSubset(int64_t n, int64_t m, std::mt19937_64& rng) {
  std::vector<int32_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<size_t>(std::min(n, m)));
  std::sort(all.begin(), all.end());
  return all;
}

// compress::AdaptiveCount and TopIndices, restated.
int64_t RefCount(const std::vector<float>& a, double tau) {
  if (tau >= 1.0) return std::count_if(a.begin(), a.end(), [](float x) { return x > 0.f; });
  std::vector<float> s = a;
  std::sort(s.begin(), s.end(), std::greater<float>());
  double total = 0;
  for (float x : s) total += x;
  if (total <= 0) return 0;
  double prefix = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    if (prefix >= tau * total) return static_cast<int64_t>(k);
    prefix += s[k];
  }
  return static_cast<int64_t>(s.size());
}
std::vector<int32_t> RefTop(const std::vector<float>& score, int64_t p) {
  std::vector<int32_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t x, int32_t y) { return score[x] > score[y]; });
  idx.resize(static_cast<size_t>(p));
  std::sort(idx.begin(), idx.end());
  return idx;
}

std::vector<int32_t> HostI32(const Tensor& t) {
  auto h = t.To(Device::Cpu());
  FZ_CHECK(h.ok());
  return std::vector<int32_t>(h->data<int32_t>(), h->data<int32_t>() + h->numel());
}

TEST_CASE("ZipVL probe scores on the GPU match the f64 definition", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const bool per_kv_head = GENERATE(false, true);
  const int64_t n = 333, heads = 6, g = 2, d = 64, rep = heads / g;
  const auto q = MakeRandom({n, heads, d}, DType::kF32, rng);
  const auto k = MakeRandom({n, g, d}, DType::kF32, rng);
  auto probes = RandomSortedSubset(n - 40, 25, rng);  // random probes + the 40 most recent
  for (int64_t i = n - 40; i < n; ++i) probes.push_back(static_cast<int32_t>(i));
  const int64_t groups = per_kv_head ? g : 1;

  std::vector<double> a(static_cast<size_t>(groups * n), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t kvh = h / rep, grp = per_kv_head ? kvh : 0;
    for (int32_t i : probes) {
      std::vector<double> s(static_cast<size_t>(i) + 1);
      double mx = -1e300;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) {
          dot += q.values[(i * heads + h) * d + e] * k.values[(j * g + kvh) * d + e];
        }
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j <= i; ++j) a[grp * n + j] += s[j] / sum;
    }
  }
  std::vector<double> want_norm(a.size()), want_counts(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const auto c = std::count_if(probes.begin(), probes.end(), [&](int32_t p) { return p >= j; });
    want_counts[j] = static_cast<double>(c);
    for (int64_t gi = 0; gi < groups; ++gi) want_norm[gi * n + j] = c > 0 ? a[gi * n + j] / c : 0;
  }
  Tensor ga = OnGpu(MakeEmpty({groups, n})), gn = OnGpu(MakeEmpty({groups, n}));
  Tensor gc = OnGpu(MakeEmpty({n}, DType::kI32));
  const auto st =
      ops::ProbeScoresCuda(OnGpu(q.tensor), OnGpu(k.tensor), probes, per_kv_head, ga, gn, gc);
  INFO(st.ToString());
  REQUIRE(st.ok());
  const double amax = *std::max_element(a.begin(), a.end());
  // Per element (a column far below the attention sink's must be right too): f32 sums of at most
  // probes × heads softmax terms against f64, well inside 1e-4 relative.
  RequireClose(ga, a, 1e-6 * amax, 1e-4);
  RequireClose(gn, want_norm, 1e-6 * amax, 1e-4);
  const auto counts = HostI32(gc);
  for (int64_t j = 0; j < n; ++j) REQUIRE(counts[j] == static_cast<int32_t>(want_counts[j]));
}

TEST_CASE("ZipVL top-p on the GPU matches the CPU rule exactly", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const double tau = GENERATE(0.5, 0.9, 0.975, 1.0);
  const int64_t n = GENERATE(1, 37, 5000);
  std::exponential_distribution<float> expo(1.0f);
  std::vector<float> a(static_cast<size_t>(n)), norm(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    a[j] = j % 11 == 0 ? 0.f : expo(rng);  // some zero mass
    norm[j] = expo(rng);
  }
  for (int64_t j = 3; j < n; j += 7) norm[j] = norm[j - 3];  // planted ties in ã
  auto upload = [](const std::vector<float>& v) {
    Tensor t = MakeEmpty({static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data<float>());
    return OnGpu(t);
  };
  Tensor idx = OnGpu(MakeEmpty({n}, DType::kI32));
  const auto p = ops::TopPCuda(upload(a), upload(norm), tau, idx);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  const int64_t want_p = RefCount(a, tau);
  REQUIRE(*p == want_p);
  auto got = HostI32(idx);
  got.resize(static_cast<size_t>(*p));
  CHECK(got == RefTop(norm, want_p));
}

TEST_CASE("Sparse prefill on the GPU matches the CPU op", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t t = 210, heads = 14, g = 2, d = GENERATE(64, 128);
  const auto q = MakeRandom({t, heads, d}, DType::kF32, rng);
  const auto k = MakeRandom({t, g, d}, DType::kF32, rng);
  const auto v = MakeRandom({t, g, d}, DType::kF32, rng);
  const std::vector<std::vector<int32_t>> important = {RandomSortedSubset(t, 77, rng)};
  Tensor want = MakeEmpty({t, heads, d});
  REQUIRE(ops::SparsePrefillAttention(q.tensor, k.tensor, v.tensor, {}, important, ops::RestRows{},
                                      want)
              .ok());
  const Tensor idx = OnGpu(MakeI32(important[0]));
  Tensor got = PoisonedGpu({t, heads, d});
  const auto st = ops::SparsePrefillCuda(OnGpu(q.tensor), OnGpu(k.tensor), OnGpu(v.tensor), idx,
                                         static_cast<int64_t>(important[0].size()), got);
  INFO(st.ToString());
  REQUIRE(st.ok());
  CheckClose(got, want, testing::Tolerance{2e-5, 1e-4});
}

TEST_CASE("ZipVL sparse prefill pipeline on the GPU wires its steps together", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t t = 400, heads = 14, g = 2, d = 64;
  const auto q = MakeRandom({t, heads, d}, DType::kF32, rng);
  const auto k = MakeRandom({t, g, d}, DType::kF32, rng);
  const auto v = MakeRandom({t, g, d}, DType::kF32, rng);
  auto probes = RandomSortedSubset(t - 64, 64, rng);
  for (int64_t i = t - 64; i < t; ++i) probes.push_back(static_cast<int32_t>(i));
  const Tensor gq = OnGpu(q.tensor), gk = OnGpu(k.tensor), gv = OnGpu(v.tensor);
  // The steps one by one, to learn the important set.
  Tensor a = OnGpu(MakeEmpty({1, t})), an = OnGpu(MakeEmpty({1, t}));
  Tensor counts = OnGpu(MakeEmpty({t}, DType::kI32)), idx = OnGpu(MakeEmpty({t}, DType::kI32));
  REQUIRE(ops::ProbeScoresCuda(gq, gk, probes, false, a, an, counts).ok());
  const auto p =
      ops::TopPCuda(Tensor::View(a.raw_data(), {t}, DType::kF32, a.device()),
                    Tensor::View(an.raw_data(), {t}, DType::kF32, an.device()), 0.975, idx);
  REQUIRE(p.ok());
  REQUIRE(*p > 0);
  REQUIRE(*p <= t);
  auto important = HostI32(idx);
  important.resize(static_cast<size_t>(*p));
  REQUIRE(std::is_sorted(important.begin(), important.end()));
  Tensor want = MakeEmpty({t, heads, d});
  REQUIRE(ops::SparsePrefillAttention(q.tensor, k.tensor, v.tensor, {},
                                      std::vector<std::vector<int32_t>>{important}, ops::RestRows{},
                                      want)
              .ok());
  Tensor got = PoisonedGpu({t, heads, d});
  const auto kept = ops::ZipvlSparsePrefillCuda(gq, gk, gv, probes, 0.975, got);
  INFO(kept.status().ToString());
  REQUIRE(kept.ok());
  CHECK(*kept == *p);
  CheckClose(got, want, testing::Tolerance{2e-5, 1e-4});
}

}  // namespace
}  // namespace framezip::engine::test
