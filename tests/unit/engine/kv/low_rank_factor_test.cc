// AttentionPack's stored factors (kv/low_rank_factor.h) and position runs (kv/position_runs.h):
// int4 factors against an f64 reference on fresh random inputs, the f16 path, the checks on
// stored parts, and position runs round trips.
#include "engine/kv/low_rank_factor.h"

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "engine/kv/position_runs.h"
#include "tests/testing/random.h"

namespace framezip::engine::kv {
namespace {

TEST_CASE("int4 factors decode within half a quantisation step of each value",
          "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  // Odd sizes: a partial last row group and a nibble count that ends mid-byte.
  const auto [rows, cols] =
      GENERATE(std::pair<int64_t, int64_t>{77, 9}, std::pair<int64_t, int64_t>{32, 64},
               std::pair<int64_t, int64_t>{1, 3});
  CAPTURE(rows, cols);
  std::vector<float> x = testing::RandomNormal(static_cast<size_t>(rows * cols), rng);
  // Columns of U·S carry singular values of very different size (kept above f16's subnormals,
  // where a scale's rounding is no longer relative).
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const auto decay = static_cast<float>(std::min<int64_t>(c, 12));
      x[static_cast<size_t>(r * cols + c)] *= std::pow(0.6f, decay);
    }
  }
  const LowRankFactor f = LowRankFactor::Encode(x, rows, cols, FactorFormat::kInt4);
  CHECK(f.bytes() ==
        LowRankFactor::PackedBytes(rows, cols) + 2 * LowRankFactor::ScaleCount(rows, cols));
  const std::vector<float> y = f.Decode();
  REQUIRE(y.size() == x.size());
  for (int64_t g = 0; g * kInt4GroupRows < rows; ++g) {
    const int64_t r0 = g * kInt4GroupRows, r1 = std::min(rows, r0 + kInt4GroupRows);
    for (int64_t c = 0; c < cols; ++c) {
      double max_abs = 0;
      for (int64_t r = r0; r < r1; ++r) {
        max_abs = std::max(max_abs, std::fabs(double{x[static_cast<size_t>(r * cols + c)]}));
      }
      // Step max|x|/7, as rounded to f16 (relative 2^-11), and half of it per value.
      const double half_step = 0.5 * max_abs / 7 * (1 + 1e-3) + 1e-12;
      for (int64_t r = r0; r < r1; ++r) {
        const size_t i = static_cast<size_t>(r * cols + c);
        CAPTURE(r, c, x[i], y[i]);
        CHECK(std::fabs(double{y[i]} - x[i]) <= half_step);
      }
    }
  }
}

TEST_CASE("a factor's view decodes any range of rows as the whole factor decodes them",
          "[unit][engine][kv]") {
  // Decode kernels widen a chunk of rows at a time (ops::FactorView): ranges that start and end
  // inside a 32-row scale group, span several, or hold one row, in both formats.
  std::mt19937_64 rng(testing::TestSeed());
  const FactorFormat format = GENERATE(FactorFormat::kF16, FactorFormat::kInt4);
  const int64_t cols = GENERATE(8, 9, 16);
  const int64_t rows = 200;
  CAPTURE(FactorFormatName(format), cols);
  const std::vector<float> x = testing::RandomNormal(static_cast<size_t>(rows * cols), rng);
  const LowRankFactor f = LowRankFactor::Encode(x, rows, cols, format);
  const std::vector<float> whole = f.Decode();
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t first = pick(rng), n = 1 + pick(rng) % (rows - first);
    CAPTURE(first, n);
    std::vector<float> got(static_cast<size_t>((n + 1) * cols), -7.f);
    f.View().DecodeRows(first, n, got.data());
    for (int64_t i = 0; i < n * cols; ++i) {
      REQUIRE(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(whole[first * cols + i]));
    }
    for (int64_t i = n * cols; i < (n + 1) * cols; ++i) REQUIRE(got[i] == -7.f);  // nothing past
  }
}

TEST_CASE("int4 factors keep an all-zero column exactly", "[unit][engine][kv]") {
  std::vector<float> x = {0.f, 1.f, 0.f, -2.f, 0.f, 0.5f};  // [3, 2], column 0 zero
  const std::vector<float> y = LowRankFactor::Encode(x, 3, 2, FactorFormat::kInt4).Decode();
  CHECK(y[0] == 0.f);
  CHECK(y[2] == 0.f);
  CHECK(y[4] == 0.f);
  CHECK(y[3] == Approx(-2.f).epsilon(1e-3));  // the column's largest value: 7 steps
}

TEST_CASE("f16 factors decode to the f16 rounding of each value", "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const std::vector<float> x = testing::RandomNormal(5 * 7, rng);
  const LowRankFactor f = LowRankFactor::Encode(x, 5, 7, FactorFormat::kF16);
  CHECK(f.bytes() == 5 * 7 * 2);
  const std::vector<float> y = f.Decode();
  for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == F16ToF32(F32ToF16(x[i])));
}

TEST_CASE("stored factor parts of the wrong size or with a bad scale are refused",
          "[unit][engine][kv]") {
  const std::vector<Float16> scales(LowRankFactor::ScaleCount(40, 4), F32ToF16(0.1f));
  const std::vector<uint8_t> packed(LowRankFactor::PackedBytes(40, 4));
  CHECK(LowRankFactor::FromParts(FactorFormat::kInt4, 40, 4, {}, packed, scales).ok());
  CHECK(absl::IsDataLoss(LowRankFactor::FromParts(FactorFormat::kInt4, 40, 4, {},
                                                  {packed.begin(), packed.end() - 1}, scales)
                             .status()));
  CHECK(absl::IsDataLoss(
      LowRankFactor::FromParts(FactorFormat::kF16, 40, 4, {}, packed, scales).status()));
  std::vector<Float16> bad = scales;
  bad[3] = F32ToF16(-1.f);
  CHECK(absl::IsDataLoss(
      LowRankFactor::FromParts(FactorFormat::kInt4, 40, 4, {}, packed, bad).status()));
  bad[3] = F32ToF16(std::nanf(""));
  CHECK(absl::IsDataLoss(
      LowRankFactor::FromParts(FactorFormat::kInt4, 40, 4, {}, packed, bad).status()));
  CHECK(ParseFactorFormat("int4").value() == FactorFormat::kInt4);
  CHECK(absl::IsInvalidArgument(ParseFactorFormat("int3").status()));
}

TEST_CASE("position runs hold consecutive positions as one run and expand back",
          "[unit][engine][kv]") {
  const std::vector<int32_t> positions = {5, 6, 7, 8, 20, 21, 40};
  const PositionRuns runs = PositionRuns::From(positions);
  CHECK(runs.size() == 7);
  CHECK(runs.runs().size() == 3);
  CHECK(runs.bytes() == 3 * 8);
  CHECK(runs.Expand() == positions);
  auto stored = PositionRuns::FromRuns(runs.runs());
  REQUIRE(stored.ok());
  CHECK(*stored == runs);
  CHECK(PositionRuns::From(std::vector<int32_t>{}).size() == 0);
}

TEST_CASE("stored position runs that overlap, go backwards or are empty are refused",
          "[unit][engine][kv]") {
  using Run = PositionRuns::Run;
  CHECK(absl::IsDataLoss(PositionRuns::FromRuns({{0, 4}, {3, 2}}).status()));
  CHECK(absl::IsDataLoss(PositionRuns::FromRuns({{10, 1}, {2, 2}}).status()));
  CHECK(absl::IsDataLoss(PositionRuns::FromRuns({Run{4, 0}}).status()));
  CHECK(absl::IsDataLoss(PositionRuns::FromRuns({Run{-1, 2}}).status()));
  CHECK(absl::IsDataLoss(PositionRuns::FromRuns({Run{INT32_MAX, 2}}).status()));
}

}  // namespace
}  // namespace framezip::engine::kv
