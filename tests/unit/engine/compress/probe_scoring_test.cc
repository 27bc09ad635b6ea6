// ZipVL probe scoring against an f64 reference on fresh random inputs (docs/methods.md §5.3 item
// 1), on every device present (tests/unit/engine/ops/device_cases.h): the CPU's ScoreProbes and, on
// a GPU, the kernel it calls there (ops::ProbeScoresCuda).
#include "engine/compress/probe_scoring.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "tests/testing/random.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::compress {
namespace {

struct RefScores {
  std::vector<double> a, a_norm;  // [groups, n]
  std::vector<int> counts;
};

RefScores Reference(const std::vector<float>& q, const std::vector<float>& k, int64_t n, int heads,
                    int kv_heads, int d, const std::vector<int32_t>& probes, bool per_kv_head) {
  const int groups = per_kv_head ? kv_heads : 1, rep = heads / kv_heads;
  RefScores r;
  r.a.assign(static_cast<size_t>(groups * n), 0.0);
  r.counts.assign(static_cast<size_t>(n), 0);
  for (int h = 0; h < heads; ++h) {
    const int g = h / rep, group = per_kv_head ? g : 0;
    for (int32_t i : probes) {
      std::vector<double> s(static_cast<size_t>(i + 1));
      double mx = -1e300;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int e = 0; e < d; ++e) {
          dot += double(q[(i * heads + h) * d + e]) * double(k[(j * kv_heads + g) * d + e]);
        }
        s[j] = dot / std::sqrt(double(d));
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j <= i; ++j) r.a[group * n + j] += s[j] / sum;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int32_t i : probes) r.counts[j] += i >= j ? 1 : 0;
  }
  r.a_norm = r.a;
  for (int g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < n; ++j) r.a_norm[g * n + j] /= std::max(1, r.counts[j]);
  }
  return r;
}

TEST_CASE("SelectProbes takes the recent tokens plus distinct random ones", "[unit][compress]") {
  const uint64_t seed = testing::TestSeed();
  const auto probes = SelectProbes(1000, 64, 64, seed);
  REQUIRE(probes.size() == 128);
  CHECK(std::set<int32_t>(probes.begin(), probes.end()).size() == 128);
  CHECK(std::is_sorted(probes.begin(), probes.end()));
  for (int32_t i = 1000 - 64; i < 1000; ++i) {
    CHECK(std::binary_search(probes.begin(), probes.end(), i));
  }
  CHECK(probes.front() >= 0);
  CHECK(SelectProbes(1000, 64, 64, seed) == probes);  // reproducible
  CHECK(SelectProbes(1000, 64, 64, seed + 1) != probes);
  const auto all = SelectProbes(100, 64, 64, seed);
  REQUIRE(all.size() == 100);
  CHECK(all.back() == 99);
}

// A scoring scenario: n tokens of q [n, H, d] and k [n, G, d] with `recent` + `random` probes.
struct ScoringCase {
  const char* name;
  int64_t n;
  int heads, kv_heads, d;
  int64_t recent, random;
  float stddev;
};

// Per-element bound on a and ã against f64 on `device`: |got − want| <= rel·|want| + abs.
struct ScoreTolerance {
  double rel, abs;
};

ScoreTolerance ScoreToleranceOn(const Device& device, double max_a) {
  // The CPU sums each head's softmax rows in f32 and the heads in f64: 1e-3 relative, 1e-6
  // absolute.
  if (device.is_cpu()) return {1e-3, 1e-6};
  // The GPU: f32 sums of at most probes × heads softmax terms with atomics, well inside 1e-4
  // relative per element (a column far below the attention sink's must be right too), with an
  // absolute floor of 1e-6 of the largest score.
  return {1e-4, 1e-6 * max_a};
}

Tensor HostTensor(const std::vector<float>& values, Shape shape) {
  auto t = Tensor::Empty(shape, DType::kF32);
  FZ_CHECK(t.ok());
  std::copy(values.begin(), values.end(), t->data<float>());
  return *t;
}

TEST_CASE("ScoreProbes matches an f64 reference on every device", "[unit][compress][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const bool per_kv_head = GENERATE(false, true);
  const ScoringCase c = GENERATE(ScoringCase{"7 tokens 4/2 d16", 7, 4, 2, 16, 16, 24, 1.5f},
                                 ScoringCase{"300 tokens 4/2 d16", 300, 4, 2, 16, 16, 24, 1.5f},
                                 ScoringCase{"333 tokens 6/2 d64", 333, 6, 2, 64, 40, 25, 1.f});
  CAPTURE(c.name, per_kv_head);
  const int64_t n = c.n;
  const auto q = testing::RandomNormal(static_cast<size_t>(n * c.heads * c.d), rng, c.stddev);
  const auto k = testing::RandomNormal(static_cast<size_t>(n * c.kv_heads * c.d), rng, c.stddev);
  const auto probes = SelectProbes(n, c.recent, c.random, rng());
  const RefScores want = Reference(q, k, n, c.heads, c.kv_heads, c.d, probes, per_kv_head);
  const int groups = per_kv_head ? c.kv_heads : 1;
  const double max_a = *std::max_element(want.a.begin(), want.a.end());
  const Tensor q_host = HostTensor(q, {n, c.heads, c.d});
  const Tensor k_host = HostTensor(k, {n, c.kv_heads, c.d});
  test::ForEachDevice([&](const Device& device) {
    auto got = ScoreProbes(test::On(q_host, device), test::On(k_host, device), probes, per_kv_head);
    INFO(got.status().ToString());
    REQUIRE(got.ok());
    REQUIRE(got->groups == groups);
    REQUIRE(got->a.size() == want.a.size());
    const ScoreTolerance tol = ScoreToleranceOn(device, max_a);
    for (int g = 0; g < groups; ++g) {
      double total = 0;
      for (int64_t j = 0; j < n; ++j) {
        const size_t idx = static_cast<size_t>(g * n + j);
        CAPTURE(g, j);
        CHECK(got->counts[j] == want.counts[j]);
        CHECK(got->counts[j] >= 1);
        CHECK(std::abs(got->a[idx] - want.a[idx]) <= tol.rel * std::abs(want.a[idx]) + tol.abs);
        CHECK(std::abs(got->a_norm[idx] - want.a_norm[idx]) <=
              tol.rel * std::abs(want.a_norm[idx]) + tol.abs);
        total += got->a[idx];
      }
      // Every probe row of every head in the group is a distribution.
      CHECK(total == Approx(double(c.heads / groups) * probes.size()).epsilon(1e-4));
    }
  });
}

TEST_CASE("ScoreProbes rejects unsorted probes and bad head counts", "[unit][compress]") {
  std::vector<float> q(4 * 2 * 8, 0.f), k(4 * 1 * 8, 0.f);
  const std::vector<int32_t> unsorted = {2, 1};
  CHECK_FALSE(ScoreProbes(q.data(), k.data(), 4, unsorted, {2, 1, 8, false}).ok());
  const std::vector<int32_t> ok = {1, 3};
  CHECK_FALSE(ScoreProbes(q.data(), k.data(), 4, ok, {3, 2, 8, false}).ok());
  CHECK(ScoreProbes(q.data(), k.data(), 4, ok, {2, 1, 8, false}).ok());
}

}  // namespace
}  // namespace framezip::engine::compress
