// ZipVL's adaptive count and split (docs/methods.md §5.3 item 2): p is minimal, τ = 1 keeps every
// token with mass, ties are deterministic.
#include "engine/compress/top_p.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <numeric>

#include "tests/testing/random.h"

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

}  // namespace
}  // namespace framezip::engine::compress
