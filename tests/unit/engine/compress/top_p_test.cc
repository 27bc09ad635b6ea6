// ZipVL's adaptive count and split (docs/methods.md §5.3 item 2): p is minimal, τ = 1 keeps every
// token with mass, ties are deterministic; the split on every device present
// (tests/unit/engine/ops/device_cases.h: the CPU's functions, the GPU's kernel ops::TopPCuda).
#include "engine/compress/top_p.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <numeric>
#include <random>
#include <utility>

#include "engine/ops/zipvl_cuda.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::compress {
namespace {

double PrefixOfLargest(std::vector<float> a, int64_t k) {
  std::sort(a.begin(), a.end(), std::greater<float>());
  double s = 0;
  for (int64_t i = 0; i < k; ++i) s += a[static_cast<size_t>(i)];
  return s;
}

TEST_CASE("AdaptiveCount returns the minimal p reaching tau of the mass", "[unit][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  const double tau = GENERATE(0.5, 0.9, 0.975, 0.999);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t n = 1 + rng() % 500;
    std::vector<float> a = testing::RandomNormal(n, rng, 2.f);
    for (float& x : a) x = std::exp(x);  // skewed positive masses, like attention
    double total = 0;
    for (float x : a) total += x;
    const int64_t p = AdaptiveCount(a, tau);
    REQUIRE(p >= 1);
    REQUIRE(p <= static_cast<int64_t>(n));
    CHECK(PrefixOfLargest(a, p) >= tau * total * (1 - 1e-12));
    if (p > 1) CHECK(PrefixOfLargest(a, p - 1) < tau * total);
  }
}

TEST_CASE("AdaptiveCount with tau 1 keeps every token with nonzero mass", "[unit][compress]") {
  std::vector<float> a = {0.f, 1000.f, 1e-30f, 0.f, 3.f, 1e-20f};
  CHECK(AdaptiveCount(a, 1.0) == 4);
  CHECK(TopIndices(a, AdaptiveCount(a, 1.0)) == std::vector<int32_t>{1, 2, 4, 5});
  CHECK(AdaptiveCount(std::vector<float>(5, 0.f), 0.9) == 0);
}

TEST_CASE("TopIndices breaks ties by index and returns sorted indices", "[unit][compress]") {
  const std::vector<float> s = {1.f, 2.f, 2.f, 0.5f, 2.f, 1.f};
  CHECK(TopIndices(s, 2) == std::vector<int32_t>{1, 2});
  CHECK(TopIndices(s, 4) == std::vector<int32_t>{0, 1, 2, 4});
  CHECK(TopIndices(s, 0).empty());
  CHECK(TopIndices(s, 99).size() == s.size());
  // Random: the chosen set is exactly the p best by (score desc, index asc).
  std::mt19937_64 rng(testing::TestSeed());
  std::vector<float> r(200);
  for (float& x : r) x = static_cast<float>(rng() % 7);  // many ties
  std::vector<int32_t> order(r.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return r[x] > r[y]; });
  std::vector<int32_t> want(order.begin(), order.begin() + 50);
  std::sort(want.begin(), want.end());
  CHECK(TopIndices(r, 50) == want);
}

// The rule of top_p.h restated: Eq. 6's count from an f64 prefix over the descending sort
// (τ >= 1: every nonzero mass), Eq. 8's set by (ã descending, index ascending).
int64_t RuleCount(const std::vector<float>& a, double tau) {
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
std::vector<int32_t> RuleTop(const std::vector<float>& score, int64_t p) {
  std::vector<int32_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t x, int32_t y) { return score[x] > score[y]; });
  idx.resize(static_cast<size_t>(p));
  std::sort(idx.begin(), idx.end());
  return idx;
}

// The device's split: AdaptiveCount and TopIndices on the CPU, ops::TopPCuda (one kernel, the
// count copied back) on a GPU. Returns p and the p indices.
std::pair<int64_t, std::vector<int32_t>> TopPOn(const Device& device, const std::vector<float>& a,
                                                const std::vector<float>& norm, double tau) {
  if (device.is_cpu()) {
    const int64_t p = AdaptiveCount(a, tau);
    return {p, TopIndices(norm, p)};
  }
  const int64_t n = static_cast<int64_t>(a.size());
  auto upload = [&](const std::vector<float>& v) {
    Tensor t = test::MakeEmpty({n});
    std::copy(v.begin(), v.end(), t.data<float>());
    return test::On(t, device);
  };
  Tensor idx = test::On(test::MakeEmpty({n}, DType::kI32), device);
  const auto p = ops::TopPCuda(upload(a), upload(norm), tau, idx);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  const Tensor host = *idx.To(Device::Cpu());
  return {*p, std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + *p)};
}

// Both outputs are integers: every device must give exactly the rule's count and set.
TEST_CASE("The top-p split on every device equals the rule exactly", "[unit][compress][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const double tau = GENERATE(0.5, 0.9, 0.975, 1.0);
  const int64_t n = GENERATE(1, 37, 5000);
  CAPTURE(tau, n);
  std::exponential_distribution<float> expo(1.0f);
  std::vector<float> a(static_cast<size_t>(n)), norm(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    a[j] = j % 11 == 0 ? 0.f : expo(rng);  // some zero mass
    norm[j] = expo(rng);
  }
  for (int64_t j = 3; j < n; j += 7) norm[j] = norm[j - 3];  // planted ties in ã
  const int64_t want_p = RuleCount(a, tau);
  const std::vector<int32_t> want = RuleTop(norm, want_p);
  test::ForEachDevice([&](const Device& device) {
    const auto [p, got] = TopPOn(device, a, norm, tau);
    REQUIRE(p == want_p);
    CHECK(got == want);
  });
}

}  // namespace
}  // namespace framezip::engine::compress
