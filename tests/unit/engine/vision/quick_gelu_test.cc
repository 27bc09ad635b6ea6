// QuickGelu (CLIP's activation) against x·sigmoid(1.702x) evaluated in f64.
#include "engine/ops/quick_gelu.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "tests/testing/compare.h"
#include "tests/testing/random.h"

namespace framezip::engine {
namespace {

TEST_CASE("QuickGelu matches x*sigmoid(1.702x) in f64", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  auto v = testing::RandomNormal(5003, rng, 4.0f);
  v.push_back(-200.0f);  // exp overflow: must give -0, not NaN
  v.push_back(200.0f);
  v.push_back(0.0f);
  auto x = Tensor::Empty({static_cast<int64_t>(v.size())}, DType::kF32);
  REQUIRE(x.ok());
  std::copy(v.begin(), v.end(), x->data<float>());
  std::vector<double> want(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double a = v[i];
    want[i] = a / (1.0 + std::exp(-1.702 * a));
  }
  auto y = Tensor::Empty(x->shape(), DType::kF32);
  REQUIRE(y.ok());
  REQUIRE(ops::QuickGelu(*x, *y).ok());
  const auto r = testing::CompareValues(testing::ToFloatVector(*y), want, {1e-7, 1e-6});
  INFO(r.message);
  CHECK(r.ok);
  // In place gives the same numbers.
  REQUIRE(ops::QuickGelu(*x, *x).ok());
  const auto r2 = testing::CompareValues(testing::ToFloatVector(*x), want, {1e-7, 1e-6});
  CHECK(r2.ok);
}

TEST_CASE("QuickGelu rejects mismatched shapes and non-f32", "[unit][engine][ops]") {
  auto a = Tensor::Empty({4}, DType::kF32);
  auto b = Tensor::Empty({5}, DType::kF32);
  auto c = Tensor::Empty({4}, DType::kBF16);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(ops::QuickGelu(*a, *b).code() == absl::StatusCode::kInvalidArgument);
  CHECK(ops::QuickGelu(*a, *c).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine
