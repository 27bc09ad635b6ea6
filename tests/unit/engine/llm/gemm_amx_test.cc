// The AMX bf16 GEMM (engine/ops/gemm_amx.h) against an f64 reference on fresh random operands,
// with shapes that leave partial tiles in every dimension, and its peak loop against the exact
// value of its recurrence. Skipped, saying so, on a CPU or OS without AMX-BF16.
#include "engine/ops/gemm_amx.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <iostream>
#include <random>
#include <vector>

#include "engine/core/half.h"
#include "engine/ops/cpu_isa.h"
#include "tests/testing/random.h"

namespace framezip::engine::ops::cpu {
namespace {

bool SkipWithoutAmx() {
  if (AmxBf16Ready()) return false;
  std::cout << "SKIPPED: this CPU or OS offers no AMX-BF16 (or FRAMEZIP_NO_AMX=1); features: "
            << IsaFeatures(DetectedIsa()) << std::endl;
  return true;
}

TEST_CASE("The AMX GEMM matches f64 on bf16-rounded operands with partial tiles",
          "[unit][engine][ops]") {
  if (SkipWithoutAmx()) return;
  std::mt19937_64 rng(testing::TestSeed());
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shape = GENERATE(Shape{1, 1, 1}, Shape{17, 33, 31}, Shape{32, 32, 32},
                               Shape{33, 130, 64}, Shape{70, 257, 95}, Shape{96, 64, 896});
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  CAPTURE(m, n, k);
  // x with a row stride larger than k, as a caller's slice of a wider buffer would have.
  const int64_t ldx = k + 3;
  const auto xv = testing::RandomNormal(static_cast<size_t>(m * ldx), rng, 1.f);
  const auto wv = testing::RandomNormal(static_cast<size_t>(n * k), rng, 0.3f);
  std::vector<uint16_t> w(wv.size());
  for (size_t i = 0; i < wv.size(); ++i) w[i] = F32ToBF16(wv[i]).bits;

  std::vector<uint16_t> x_packed(static_cast<size_t>(AmxPackedRowsSize(m, k)), 0xffff);
  std::vector<uint16_t> w_packed(static_cast<size_t>(AmxPackedColumnsSize(n, k)), 0xffff);
  const int64_t blocks16 = (m + 31) / 32 * 2;
  PackRowsForAmx(xv.data(), m, k, ldx, 0, 1, x_packed.data());  // in two calls, as tasks would
  PackRowsForAmx(xv.data(), m, k, ldx, 1, blocks16, x_packed.data());
  PackBf16ColumnsForAmx(w.data(), n, k, k, w_packed.data());

  // y wider than n, so that a write past column n would show; rows from 32 on in a second call.
  const int64_t ldy = n + 5;
  std::vector<float> y(static_cast<size_t>(m * ldy), -777.f);
  AmxGemm(x_packed.data(), 0, std::min<int64_t>(m, 32), w_packed.data(), n, k, y.data(), ldy);
  if (m > 32) AmxGemm(x_packed.data(), 32, m, w_packed.data(), n, k, y.data(), ldy);

  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldy; ++j) {
      const float got = y[static_cast<size_t>(i * ldy + j)];
      if (j >= n) {
        REQUIRE(got == -777.f);
        continue;
      }
      double want = 0, magnitude = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double xr = BF16ToF32(F32ToBF16(xv[static_cast<size_t>(i * ldx + kk)]));
        const double p = xr * BF16ToF32(BFloat16{w[static_cast<size_t>(j * k + kk)]});
        want += p;
        magnitude += std::abs(p);
      }
      // Products are exact in f32; f32 sums of k terms err by at most about k·2^-24·Σ|p|.
      const double bound = 2.0 * static_cast<double>(k) * 0x1p-24 * magnitude + 1e-30;
      CAPTURE(i, j, want, got);
      REQUIRE(std::abs(got - want) <= bound);
    }
  }
}

TEST_CASE("The AMX peak loop adds exactly 32 products per element and step",
          "[unit][engine][ops]") {
  if (SkipWithoutAmx()) return;
  // Every step adds 32 · 2^-8 · 2^-8 = 2^-11 to each element: exact in f32 from 1 to 2.
  for (const int64_t iterations : {int64_t{1}, int64_t{100}, int64_t{2000}}) {
    CAPTURE(iterations);
    CHECK(AmxTileChainValue(1.0f, iterations) == 1.0f + static_cast<float>(iterations) * 0x1p-11f);
  }
  const auto peak = PeakAmxBf16Gflops(1, 0.02);
  REQUIRE(peak.ok());
  CHECK(*peak > 0);
}

}  // namespace
}  // namespace framezip::engine::ops::cpu
