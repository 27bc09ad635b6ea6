// RmsNorm, AddRmsNorm and LayerNorm on every device present against f64
// (tests/unit/engine/ops/device_cases.h). Every device computes them in f32 from f32 activations
// and f32-converted parameters: f32 rounding only, 1e-5 abs + 1e-5 rel (docs/DEVELOPING.md §5), for
// inputs of RMS 3. The residual sum of AddRmsNorm is one f32 add: bit for bit on every device.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/ops/activation.h"
#include "engine/ops/layer_norm.h"
#include "engine/ops/rms_norm.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

constexpr testing::Tolerance kF32Rows{1e-5, 1e-5};

std::vector<double> RmsNormReference(const std::vector<double>& x, const std::vector<double>& g,
                                     int64_t rows, int64_t d, double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < d; ++i) ms += x[r * d + i] * x[r * d + i];
    const double inv = 1 / std::sqrt(ms / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = x[r * d + i] * inv * g[i];
  }
  return y;
}

std::vector<double> LayerNormReference(const std::vector<double>& x, const std::vector<double>& g,
                                       const std::vector<double>* beta, int64_t rows, int64_t d,
                                       double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += x[r * d + i];
    mean /= static_cast<double>(d);
    for (int64_t i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
    const double inv = 1 / std::sqrt(var / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) {
      y[r * d + i] = (x[r * d + i] - mean) * inv * g[i] + (beta ? (*beta)[i] : 0.0);
    }
  }
  return y;
}

TEST_CASE("RmsNorm and LayerNorm match f64 on every device with 16-bit parameters",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  // 896: Qwen2-0.5B's hidden size; 1000: not a multiple of a GPU block; 64: less than one.
  const int64_t d = GENERATE(200, 896, 1000, 64);
  const DType pdtype = GENERATE(DType::kF32, DType::kBF16, DType::kF16);
  const int64_t rows = 37;
  CAPTURE(d, DTypeName(pdtype));
  const auto x = MakeRandom({rows, d}, DType::kF32, rng, 3.f);
  const auto g = MakeRandom({d}, pdtype, rng);
  const auto beta = MakeRandom({d}, pdtype, rng);
  const auto rms_want = RmsNormReference(x.values, g.values, rows, d, 1e-6);
  ForEachDevice([&](const Device& device) {
    Tensor y = PoisonedOn({rows, d}, device);
    REQUIRE(ops::RmsNorm(On(x.tensor, device), On(g.tensor, device), 1e-6f, y).ok());
    CheckCloseTo(y, rms_want, kF32Rows);
    // In place, as the decoder calls it.
    Tensor inplace = On(x.tensor, device);
    REQUIRE(ops::RmsNorm(inplace, On(g.tensor, device), 1e-6f, inplace).ok());
    CheckCloseTo(inplace, rms_want, kF32Rows);
    for (bool with_beta : {false, true}) {
      Tensor ln = PoisonedOn({rows, d}, device);
      REQUIRE(ops::LayerNorm(On(x.tensor, device), On(g.tensor, device),
                             with_beta ? On(beta.tensor, device) : Tensor(), 1e-5f, ln)
                  .ok());
      CheckCloseTo(
          ln,
          LayerNormReference(x.values, g.values, with_beta ? &beta.values : nullptr, rows, d, 1e-5),
          kF32Rows);
    }
  });
}

TEST_CASE("AddRmsNorm on every device is the residual add then RmsNorm, output over the addend",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t rows = 9, d = GENERATE(200, 896);
  const auto x = MakeRandom({rows, d}, DType::kF32, rng, 3.f);
  const auto h = MakeRandom({rows, d}, DType::kF32, rng, 3.f);
  const auto w = MakeRandom({d}, DType::kBF16, rng);
  // The residual stream after the add: one f32 rounding of x + h.
  std::vector<double> sum(x.values.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] = static_cast<float>(static_cast<float>(x.values[i]) + static_cast<float>(h.values[i]));
  }
  const auto want = RmsNormReference(sum, w.values, rows, d, 1e-6);
  ForEachDevice([&](const Device& device) {
    Tensor residual = On(x.tensor, device);
    Tensor out = On(h.tensor, device);  // written over the addend, as llm::Decoder does
    REQUIRE(ops::AddRmsNorm(residual, out, On(w.tensor, device), 1e-6f, out).ok());
    CheckCloseTo(residual, sum, {0.0, 0.0});
    CheckCloseTo(out, want, kF32Rows);

    // The sum must survive: an output over the residual is refused, as is a narrower addend.
    const Status alias =
        ops::AddRmsNorm(residual, On(h.tensor, device), On(w.tensor, device), 1e-6f, residual);
    CHECK(alias.code() == absl::StatusCode::kInvalidArgument);
    Tensor narrow = PoisonedOn({rows, d - 1}, device);
    CHECK(ops::AddRmsNorm(residual, narrow, On(w.tensor, device), 1e-6f, out).code() ==
          absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace framezip::engine::test
