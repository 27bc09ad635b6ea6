// The element-wise and row ops on every device present against f64
// (tests/unit/engine/ops/device_cases.h): Gelu (erf and tanh), SiluMul (and over a fused gate/up
// row: SiluMulHalves), Add, QuickGelu, Softmax
// and Cast. All are f32 arithmetic. The CPU's exp/erf/tanh are within a few ulp of f64
// (1e-6 abs + 1e-6 rel); CUDA's device functions differ from glibc's by a few more ulp, and its
// outputs here are compared at 2e-5 abs + 2e-5 rel (f32 rounding, docs/DEVELOPING.md §5, with
// room for those ulps on products of order 10). Add is one f32 rounding and Cast one rounding to
// nearest even: bit for bit everywhere.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "engine/ops/activation.h"
#include "engine/ops/cast.h"
#include "engine/ops/quick_gelu.h"
#include "engine/ops/softmax.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

testing::Tolerance TranscendentalTolerance(const Device& device) {
  return device.is_cpu() ? testing::Tolerance{1e-6, 1e-6} : testing::Tolerance{2e-5, 2e-5};
}

std::vector<double> Map(const std::vector<double>& v, double (*f)(double)) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f(v[i]);
  return out;
}

double GeluErf(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }
double GeluTanh(double v) {
  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
}
double QuickGeluOf(double v) { return v / (1 + std::exp(-1.702 * v)); }

TEST_CASE("Gelu, SiluMul and Add match f64 on every device", "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const Shape shape = {3, 33335};  // above one parallel grain, not a multiple of any block
  const auto a = MakeRandom(shape, DType::kF32, rng, 4.f);
  const auto b = MakeRandom(shape, DType::kF32, rng, 4.f);
  std::vector<double> silu_mul(a.values.size()), sum(a.values.size());
  for (size_t i = 0; i < a.values.size(); ++i) {
    silu_mul[i] = a.values[i] / (1 + std::exp(-a.values[i])) * b.values[i];
    sum[i] = static_cast<float>(static_cast<float>(a.values[i]) + static_cast<float>(b.values[i]));
  }
  ForEachDevice([&](const Device& device) {
    const auto tol = TranscendentalTolerance(device);
    for (auto form : {ops::GeluApproximation::kErf, ops::GeluApproximation::kTanh}) {
      Tensor y = PoisonedOn(shape, device);
      REQUIRE(ops::Gelu(On(a.tensor, device), form, y).ok());
      CheckCloseTo(y, Map(a.values, form == ops::GeluApproximation::kErf ? GeluErf : GeluTanh),
                   tol);
    }
    Tensor y = PoisonedOn(shape, device);
    REQUIRE(ops::SiluMul(On(a.tensor, device), On(b.tensor, device), y).ok());
    CheckCloseTo(y, silu_mul, tol);
    Tensor in_place = On(a.tensor, device);  // as the residual stream is updated
    REQUIRE(ops::Add(in_place, On(b.tensor, device), in_place).ok());
    CheckCloseTo(in_place, sum, {0.0, 0.0});
  });
}

TEST_CASE("SiluMulHalves over a fused gate/up row equals SiluMul on its halves on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  // One row (a decode step) and rows of a width no chunk of the CPU's divides evenly.
  const int64_t rows = GENERATE(1, 5), width = 4864 + 3;
  CAPTURE(rows);
  const auto gate_up = MakeRandom({rows, 2 * width}, DType::kF32, rng, 4.f);
  auto half_of = [&](int64_t first) {
    Tensor t = *Tensor::Empty({rows, width}, DType::kF32);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < width; ++c) {
        t.data<float>()[r * width + c] = gate_up.tensor.data<float>()[r * 2 * width + first + c];
      }
    }
    return t;
  };
  const Tensor gate = half_of(0), up = half_of(width);
  std::vector<double> want(static_cast<size_t>(rows * width));
  for (int64_t i = 0; i < rows * width; ++i) {
    const double g = gate.data<float>()[i], u = up.data<float>()[i];
    want[static_cast<size_t>(i)] = g / (1 + std::exp(-g)) * u;
  }
  ForEachDevice([&](const Device& device) {
    Tensor y = PoisonedOn({rows, width}, device);
    REQUIRE(ops::SiluMulHalves(On(gate_up.tensor, device), y).ok());
    CheckCloseTo(y, want, TranscendentalTolerance(device));
    Tensor separate = PoisonedOn({rows, width}, device);
    REQUIRE(ops::SiluMul(On(gate, device), On(up, device), separate).ok());
    const std::vector<float> s = testing::ToFloatVector(separate);
    CheckCloseTo(y, std::vector<double>(s.begin(), s.end()), {0.0, 0.0});
    Tensor wrong = PoisonedOn({rows, width + 1}, device);
    CHECK(ops::SiluMulHalves(On(gate_up.tensor, device), wrong).code() ==
          absl::StatusCode::kInvalidArgument);
    // An output inside the input (the input's first rows viewed as [rows, width]) is refused.
    const Tensor input = On(gate_up.tensor, device);
    Tensor inside = *(*input.Reshape({2 * rows, width})).Slice(0, rows);
    CHECK(ops::SiluMulHalves(input, inside).code() == absl::StatusCode::kInvalidArgument);
  });
}

TEST_CASE("QuickGelu matches f64 on every device, tails included", "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  // Where e^(-1.702x) overflows the result must be -0, not NaN.
  auto a = MakeRandom({3, 33335}, DType::kF32, rng, 3.f);
  for (auto [i, v] : {std::pair{0, -100.f}, std::pair{1, 100.f}, std::pair{2, -60.f},
                      std::pair{3, -200.f}, std::pair{4, 200.f}, std::pair{5, 0.f}}) {
    a.tensor.data<float>()[i] = v;
    a.values[static_cast<size_t>(i)] = v;
  }
  const auto want = Map(a.values, QuickGeluOf);
  ForEachDevice([&](const Device& device) {
    Tensor y = PoisonedOn(a.tensor.shape(), device);
    REQUIRE(ops::QuickGelu(On(a.tensor, device), y).ok());
    CheckCloseTo(y, want, TranscendentalTolerance(device));
    Tensor in_place = On(a.tensor, device);
    REQUIRE(ops::QuickGelu(in_place, in_place).ok());
    CheckCloseTo(in_place, want, TranscendentalTolerance(device));
  });
}

TEST_CASE("QuickGelu rejects mismatched shapes and non-f32 on every device",
          "[unit][engine][ops][devices]") {
  ForEachDevice([&](const Device& device) {
    const Tensor a = PoisonedOn({4}, device);
    Tensor longer = PoisonedOn({5}, device);
    Tensor bf16 = PoisonedOn({4}, device, DType::kBF16);
    CHECK(ops::QuickGelu(a, longer).code() == absl::StatusCode::kInvalidArgument);
    CHECK(ops::QuickGelu(a, bf16).code() == absl::StatusCode::kInvalidArgument);
  });
}

TEST_CASE("Softmax matches f64 on every device, masked entries and a fully masked row",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  // Rows longer than a GPU block (1000, 5000) and shorter than a warp (7).
  const int64_t n = GENERATE(1000, 5000, 7);
  const int64_t rows = 6;
  auto x = MakeRandom({rows, n}, DType::kF32, rng, 4.f);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < rows * n; ++i) {
    if (i % 5 == 0 || (i >= 2 * n && i < 3 * n)) {
      x.tensor.data<float>()[i] = -INFINITY;
      x.values[static_cast<size_t>(i)] = -kInf;
    }
  }
  std::vector<double> want(x.values.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.values.data() + r * n;
    double mx = -kInf, sum = 0;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, row[i]);
    for (int64_t i = 0; i < n; ++i) sum += std::isinf(mx) ? 0 : std::exp(row[i] - mx);
    for (int64_t i = 0; i < n; ++i) want[r * n + i] = sum == 0 ? 0 : std::exp(row[i] - mx) / sum;
  }
  ForEachDevice([&](const Device& device) {
    const testing::Tolerance tol =
        device.is_cpu() ? testing::Tolerance{1e-7, 1e-5} : testing::Tolerance{1e-6, 2e-5};
    Tensor y = PoisonedOn({rows, n}, device);
    REQUIRE(ops::Softmax(On(x.tensor, device), y).ok());
    CheckCloseTo(y, want, tol);
    Tensor in_place = On(x.tensor, device);
    REQUIRE(ops::Softmax(in_place, in_place).ok());
    CheckCloseTo(in_place, want, tol);
  });
}

TEST_CASE("Cast to 16-bit rounds to nearest even on every device", "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const auto x = MakeRandom({100003}, DType::kF32, rng, 10.f);
  for (DType to : {DType::kBF16, DType::kF16}) {
    const auto want = RoundedTo(x.values, to);  // half.h's conversion: round to nearest even
    // ... and that conversion is within half an ulp of the value: 2^-8 relative for bf16 (8
    // significant bits), 2^-11 for f16 (11) in its normal range.
    for (size_t i = 0; i < want.size(); ++i) {
      const double bound = std::fabs(x.values[i]) * (to == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048);
      REQUIRE(std::fabs(want[i] - x.values[i]) <= bound + 1e-7);
    }
    ForEachDevice([&](const Device& device) {
      Tensor y = PoisonedOn(x.tensor.shape(), device, to);
      REQUIRE(ops::Cast(On(x.tensor, device), y).ok());
      CheckCloseTo(y, want, {0.0, 0.0});
    });
  }
}

TEST_CASE("Cast refuses mismatched shapes and integer tensors on every device",
          "[unit][engine][ops][devices]") {
  ForEachDevice([&](const Device& device) {
    const Tensor a = PoisonedOn({4}, device);
    Tensor longer = PoisonedOn({5}, device, DType::kBF16);
    CHECK(ops::Cast(a, longer).code() == absl::StatusCode::kInvalidArgument);
    Tensor ints = On(MakeI32({1, 2, 3, 4}), device);
    CHECK(ops::Cast(a, ints).code() == absl::StatusCode::kInvalidArgument);
  });
}

TEST_CASE("ConvertElements converts or copies raw device memory on every device",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const auto x = MakeRandom({1027}, DType::kF32, rng, 10.f);
  const auto halves = RoundedTo(x.values, DType::kF16);
  ForEachDevice([&](const Device& device) {
    const Tensor src = On(x.tensor, device);
    Tensor copy = PoisonedOn({1027}, device);
    REQUIRE(ops::ConvertElements(device, src.raw_data(), DType::kF32, copy.raw_data(), DType::kF32,
                                 1027)
                .ok());
    CheckCloseTo(copy, x.values, {0.0, 0.0});
    Tensor half = PoisonedOn({1027}, device, DType::kF16);
    REQUIRE(ops::ConvertElements(device, src.raw_data(), DType::kF32, half.raw_data(), DType::kF16,
                                 1027)
                .ok());
    Tensor back = PoisonedOn({1027}, device);
    REQUIRE(ops::ConvertElements(device, half.raw_data(), DType::kF16, back.raw_data(), DType::kF32,
                                 1027)
                .ok());
    CheckCloseTo(back, halves, {0.0, 0.0});
    CHECK(
        ops::ConvertElements(device, src.raw_data(), DType::kF32, copy.raw_data(), DType::kF32, -1)
            .code() == absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace framezip::engine::test
