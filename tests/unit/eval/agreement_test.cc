// Teacher-forced agreement counts against a long-double reference on fresh random logits.
#include "tools/eval/agreement.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "tests/testing/random.h"

namespace framezip::eval {
namespace {

// KL(softmax(p) || softmax(q)) in long double, straight from the definition.
long double ReferenceKl(const float* p, const float* q, int64_t v) {
  long double zp = 0, zq = 0;
  for (int64_t i = 0; i < v; ++i) {
    zp += std::exp(static_cast<long double>(p[i]));
    zq += std::exp(static_cast<long double>(q[i]));
  }
  long double kl = 0;
  for (int64_t i = 0; i < v; ++i) {
    const long double pi = std::exp(static_cast<long double>(p[i])) / zp;
    const long double qi = std::exp(static_cast<long double>(q[i])) / zq;
    kl += pi * std::log(pi / qi);
  }
  return kl;
}

TEST_CASE("CompareNextTokenLogits counts argmax matches and KL like a long-double reference",
          "[unit][eval]") {
  const uint64_t seed = testing::TestSeed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 3.f);
  const int64_t n = 9, v = 448;
  std::vector<float> p(n * v), q(n * v);
  for (float& x : p) x = normal(rng);
  int64_t want_matches = 0;
  long double want_kl = 0;
  for (int64_t r = 0; r < n; ++r) {
    // Rows alternate: a small perturbation (argmax kept), or a different winner.
    for (int64_t i = 0; i < v; ++i) q[r * v + i] = p[r * v + i] + 0.05f * normal(rng);
    const float* pr = p.data() + r * v;
    float* qr = q.data() + r * v;
    const int64_t top = std::max_element(pr, pr + v) - pr;
    if (r % 2 == 1) {
      qr[(top + 1) % v] = pr[top] + 5;  // a clear new winner
    } else {
      qr[top] = pr[top] + 5;  // keep p's winner clearly on top
      ++want_matches;
    }
    want_kl += ReferenceKl(pr, qr, v);
  }
  auto got = CompareNextTokenLogits(p, q, v);
  REQUIRE(got.ok());
  CHECK(got->positions == n);
  CHECK(got->matches == want_matches);
  CHECK(got->kl_sum == Approx(static_cast<double>(want_kl)).epsilon(1e-9));
  CHECK(got->top1() == Approx(static_cast<double>(want_matches) / n));
  CHECK(got->mean_kl() > 0);

  // Identical logits: full agreement and zero divergence.
  auto same = CompareNextTokenLogits(p, p, v);
  REQUIRE(same.ok());
  CHECK(same->matches == n);
  CHECK(same->kl_sum == 0);
}

TEST_CASE("CompareNextTokenLogits rejects logits that are not rows of the vocabulary",
          "[unit][eval]") {
  const std::vector<float> a(10, 0.f), b(12, 0.f);
  CHECK(CompareNextTokenLogits(a, b, 5).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(CompareNextTokenLogits(a, a, 3).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(CompareNextTokenLogits(a, a, 0).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("AgreementCounts add up over items", "[unit][eval]") {
  AgreementCounts total;
  total.Add({.positions = 3, .matches = 3, .kl_sum = 0.3});
  total.Add({.positions = 1, .matches = 0, .kl_sum = 0.5});
  CHECK(total.positions == 4);
  CHECK(total.top1() == Approx(0.75));
  CHECK(total.mean_kl() == Approx(0.2));
  CHECK(AgreementCounts{}.top1() == 0);
}

}  // namespace
}  // namespace framezip::eval
