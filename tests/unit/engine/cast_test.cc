#include "engine/ops/cast.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "engine/core/half.h"
#include "tests/testing/compare.h"
#include "tests/testing/random.h"

namespace framezip::engine {
namespace {

using testing::CompareValues;

Tensor RandomF32(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto v = testing::RandomNormal(static_cast<size_t>(n), rng, 3.f);
  auto t = Tensor::Empty({n}, DType::kF32);
  FZ_CHECK(t.ok());
  std::copy(v.begin(), v.end(), t->data<float>());
  return *t;
}

TEST_CASE("Cast to 16-bit stays within half an ulp of the f64 value", "[unit][engine][ops]") {
  const Tensor in = RandomF32(4099, testing::TestSeed());
  for (DType to : {DType::kBF16, DType::kF16}) {
    auto out = Tensor::Empty(in.shape(), to);
    REQUIRE(out.ok());
    REQUIRE(ops::Cast(in, *out).ok());
    const auto got = testing::ToFloatVector(*out);
    for (int64_t i = 0; i < in.numel(); ++i) {
      const double want = in.data<float>()[i];
      // Half an ulp: 2^-8 relative for bf16 (8-bit mantissa), 2^-11 for f16 (normal range).
      const double bound = std::fabs(want) * (to == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048) + 1e-7;
      REQUIRE(std::fabs(got[i] - want) <= bound);
    }
  }
}

TEST_CASE("Cast refuses mismatched shapes and integer tensors", "[unit][engine][ops]") {
  auto a = Tensor::Empty({4}, DType::kF32);
  auto b = Tensor::Empty({5}, DType::kBF16);
  auto c = Tensor::Empty({4}, DType::kI32);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(ops::Cast(*a, *b).code() == absl::StatusCode::kInvalidArgument);
  CHECK(ops::Cast(*a, *c).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine
