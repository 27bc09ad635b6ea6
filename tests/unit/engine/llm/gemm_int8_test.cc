// The int8 Linear (engine/ops/gemm_int8.h, quantize_int8.h, the weight_scale overload of
// ops::Linear) against f64 references on fresh random inputs.
//
// Each kernel is checked against the f64 product of the same quantised operands: the integer sums
// are exact in every kernel, so the only error left is the f32 rounding of sum · x_scale ·
// w_scale (+ bias), a few ulps: the bound is 1e-6 of the scaled magnitude Σ|xq·q|·x_scale·w_scale
// (1e-5 relative to an output of that size would already flag one wrong product of 1e5). The
// quantisers are checked against their definition separately, and the Linear entry point against
// the f64 product of the unquantised operands with the bound quantisation itself allows.
// Kernels the machine cannot run are skipped, saying so.
#include "engine/ops/gemm_int8.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <iostream>
#include <optional>
#include <random>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_isa.h"
#include "engine/ops/gemm_amx.h"
#include "engine/ops/linear.h"
#include "engine/ops/quantize_int8.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::ops::cpu {
namespace {

// A row whose entries vary over a wide range, with an exact zero row now and then, so that the
// scales differ per row and the zero-scale case is covered.
std::vector<float> RandomRows(int64_t rows, int64_t cols, std::mt19937_64& rng, float stddev) {
  auto v = testing::RandomNormal(static_cast<size_t>(rows * cols), rng, stddev);
  std::uniform_real_distribution<float> spread(0.1f, 3.f);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = r % 7 == 5 ? 0.f : spread(rng);
    for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(r * cols + c)] *= s;
  }
  return v;
}

// The definition: scale = max|row| / 127, q = row / scale rounded, |q| ≤ 127.
void CheckQuantisedRow(const float* row, int64_t k, const int8_t* q, float scale) {
  double max = 0;
  for (int64_t i = 0; i < k; ++i) max = std::max(max, std::abs(double{row[i]}));
  REQUIRE(std::abs(scale - max / 127) <= 1e-6 * max / 127);
  for (int64_t i = 0; i < k; ++i) {
    CAPTURE(i, row[i], int{q[i]}, scale);
    REQUIRE(std::abs(int{q[i]}) <= 127);
    if (max == 0) {
      REQUIRE(q[i] == 0);
    } else {
      REQUIRE(std::abs(q[i] - row[i] * 127.0 / max) <= 0.5 + 1e-4);
    }
  }
}

TEST_CASE("QuantizeWeightInt8 and QuantizeRowsInt8 follow their definition",
          "[unit][engine][ops]") {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t n = 23, k = GENERATE(1, 37, 64, 200);
  CAPTURE(k);
  const auto w = RandomRows(n, k, rng, 0.05f);
  const auto q = ops::QuantizeWeightInt8(test::MakeF32(w, {n, k}));
  REQUIRE(q.ok());
  REQUIRE(q->q.dtype() == DType::kI8);
  REQUIRE(q->scale.shape() == Shape{n});
  for (int64_t j = 0; j < n; ++j) {
    CheckQuantisedRow(w.data() + j * k, k, q->q.data<int8_t>() + j * k, q->scale.data<float>()[j]);
  }
  // Rows of x, with and without the +128 offset, padded to 64 with the padding code.
  const int64_t ldq = (k + 63) / 64 * 64;
  for (const bool offset : {false, true}) {
    CAPTURE(offset);
    std::vector<int8_t> xq(static_cast<size_t>(n * ldq), 55);
    std::vector<float> xs(static_cast<size_t>(n), -1.f);
    QuantizeRowsInt8(w.data(), k, k, 0, 5, offset, xq.data(), ldq, xs.data());
    QuantizeRowsInt8(w.data(), k, k, 5, n, offset, xq.data(), ldq, xs.data());
    for (int64_t j = 0; j < n; ++j) {
      std::vector<int8_t> codes(static_cast<size_t>(ldq));
      for (int64_t i = 0; i < ldq; ++i) {
        codes[static_cast<size_t>(i)] = static_cast<int8_t>(
            static_cast<uint8_t>(xq[static_cast<size_t>(j * ldq + i)]) ^ (offset ? 0x80 : 0));
      }
      CheckQuantisedRow(w.data() + j * k, k, codes.data(), xs[static_cast<size_t>(j)]);
      for (int64_t i = k; i < ldq; ++i) REQUIRE(codes[static_cast<size_t>(i)] == 0);
      // The weights' quantiser and the activations' round identically.
      for (int64_t i = 0; i < k; ++i) {
        REQUIRE(codes[static_cast<size_t>(i)] == q->q.data<int8_t>()[j * k + i]);
      }
    }
  }
}

TEST_CASE("ops::QuantizeWeightInt8 refuses what it cannot quantise", "[unit][engine][ops]") {
  auto i32 = Tensor::Zeros({2, 3}, DType::kI32);
  REQUIRE(i32.ok());
  CHECK(ops::QuantizeWeightInt8(*i32).status().code() == absl::StatusCode::kInvalidArgument);
  auto rank1 = Tensor::Zeros({3}, DType::kF32);
  REQUIRE(rank1.ok());
  CHECK(ops::QuantizeWeightInt8(*rank1).status().code() == absl::StatusCode::kInvalidArgument);
}

struct Problem {
  int64_t m, n, k;
  std::vector<float> x, bias;
  ops::Int8Weight w;
  PackedInt8Weight packed;
};

Problem MakeProblem(int64_t m, int64_t n, int64_t k, std::mt19937_64& rng) {
  Problem p{
      m,  n, k, RandomRows(m, k, rng, 1.f), testing::RandomNormal(static_cast<size_t>(n), rng),
      {}, {}};
  auto w = ops::QuantizeWeightInt8(test::MakeF32(RandomRows(n, k, rng, 0.05f), {n, k}));
  REQUIRE(w.ok());
  p.w = *std::move(w);
  // -128 where a checkpoint's quantiser puts it (compressed-tensors divides by 127.5, so a
  // channel's most negative weight may land there): in every third row, at a random column.
  std::uniform_int_distribution<int64_t> column(0, k - 1);
  for (int64_t j = 0; j < n; j += 3) p.w.q.data<int8_t>()[j * k + column(rng)] = -128;
  SizePackedInt8Weight(n, k, p.packed);
  PackInt8Weight(p.w.q.data<int8_t>(), p.w.scale.data<float>(), 0, p.packed.col_blocks / 2,
                 p.packed);  // in two calls, as tasks would
  PackInt8Weight(p.w.q.data<int8_t>(), p.w.scale.data<float>(), p.packed.col_blocks / 2,
                 p.packed.col_blocks, p.packed);
  return p;
}

// y (row stride ldy) for rows [0, m) and columns [j0, j1) against the f64 product of the
// quantised operands; columns outside [j0, j1) must still hold `untouched`.
void CheckAgainstQuantisedReference(const Problem& p, const std::vector<int8_t>& xq_signed,
                                    const std::vector<float>& xs, bool with_bias,
                                    const std::vector<float>& y, int64_t ldy, int64_t j0,
                                    int64_t j1, float untouched) {
  const int64_t kp = p.packed.k_padded();
  const int8_t* q = p.w.q.data<int8_t>();
  const float* ws = p.w.scale.data<float>();
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < ldy; ++j) {
      const float got = y[static_cast<size_t>(i * ldy + j)];
      if (j < j0 || j >= j1) {
        REQUIRE(got == untouched);
        continue;
      }
      double sum = 0, magnitude = 0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double prod =
            static_cast<double>(xq_signed[static_cast<size_t>(i * kp + kk)]) * q[j * p.k + kk];
        sum += prod;
        magnitude += std::abs(prod);
      }
      const double s = double{xs[static_cast<size_t>(i)]} * ws[j];
      const double b = with_bias ? p.bias[static_cast<size_t>(j)] : 0.0;
      const double want = sum * s + b;
      CAPTURE(i, j, want, got);
      REQUIRE(std::abs(got - want) <= 1e-6 * (magnitude * s + std::abs(b)) + 1e-30);
    }
  }
}

TEST_CASE("Every int8 kernel matches f64 on the same quantised operands, with partial tiles",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const Int8Kernel kernel =
      GENERATE(Int8Kernel::kScalar, Int8Kernel::kAvx2, Int8Kernel::kAvx512Vnni, Int8Kernel::kAmx);
  if (!Int8KernelAvailable(kernel)) {
    std::cout << "SKIPPED: int8 kernel " << Int8KernelName(kernel)
              << " does not run here; features: " << IsaFeatures(DetectedIsa()) << std::endl;
    return;
  }
  struct Shape {
    int64_t n, k;
  };
  const int64_t m = GENERATE(1, 3, 17, 75, 300);
  // K not a multiple of 64 (and of 4), N not of 16; 896 × 136 a Qwen2-like width with a
  // column count that leaves a partial 32-column block.
  const Shape shape = GENERATE(Shape{1, 5}, Shape{37, 100}, Shape{130, 64}, Shape{136, 896});
  const bool with_bias = GENERATE(false, true);
  if (kernel == Int8Kernel::kScalar && m * shape.n * shape.k > 2'000'000) return;  // too slow
  CAPTURE(Int8KernelName(kernel), m, shape.n, shape.k, with_bias);
  const Problem p = MakeProblem(m, shape.n, shape.k, rng);
  const int64_t kp = p.packed.k_padded();
  std::vector<int8_t> xq(static_cast<size_t>(m * kp)), xq_signed(xq.size());
  std::vector<float> xs(static_cast<size_t>(m));
  QuantizeRowsInt8(p.x.data(), p.k, p.k, 0, m, Int8KernelWantsOffset(kernel), xq.data(), kp,
                   xs.data());
  for (size_t i = 0; i < xq.size(); ++i) {
    xq_signed[i] = static_cast<int8_t>(static_cast<uint8_t>(xq[i]) ^
                                       (Int8KernelWantsOffset(kernel) ? 0x80 : 0));
  }
  // y wider than n, so that a write past column n would show.
  const int64_t ldy = p.n + 5;
  std::vector<float> y(static_cast<size_t>(m * ldy), -777.f);
  const float* bias = with_bias ? p.bias.data() : nullptr;
  if (kernel == Int8Kernel::kAmx) {
    std::vector<int8_t> tiles(static_cast<size_t>(AmxInt8PackedRowsSize(m, kp)), 99);
    const int64_t blocks16 = (m + 31) / 32 * 2;
    PackInt8RowsForAmx(xq.data(), m, kp, 0, 1, tiles.data());
    PackInt8RowsForAmx(xq.data(), m, kp, 1, blocks16, tiles.data());
    // Rows from 32 on and columns from 32 on in separate calls, as tasks would run them.
    const int64_t split = std::min<int64_t>(32, p.n);
    for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, std::min<int64_t>(m, 32)},
                                 std::pair<int64_t, int64_t>{32, m}}) {
      if (r0 >= r1) continue;
      AmxInt8Gemm(tiles.data(), xs.data(), r0, r1, p.packed, 0, split, bias, y.data(), ldy);
      AmxInt8Gemm(tiles.data(), xs.data(), r0, r1, p.packed, split, p.n, bias, y.data(), ldy);
    }
    CheckAgainstQuantisedReference(p, xq_signed, xs, with_bias, y, ldy, 0, p.n, -777.f);
  } else {
    // Columns [16, n) only when there are more than 16: the kernel must leave the others alone.
    const int64_t j0 = p.n > 16 ? 16 : 0;
    Int8GemvRows(kernel, xq.data(), xs.data(), m, p.packed, j0, p.n, bias, y.data(), ldy);
    CheckAgainstQuantisedReference(p, xq_signed, xs, with_bias, y, ldy, j0, p.n, -777.f);
  }
}

TEST_CASE("Linear with int8 weights stays within the quantisation bound of the f64 product",
          "[unit][engine][ops]") {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t m = GENERATE(1, 3, 16, 17, 75, 300);
  const bool amx_allowed = GENERATE(true, false);
  std::optional<ScopedF32Gemm> no_amx;
  if (!amx_allowed) no_amx.emplace();
  const int64_t n = 200, k = 333;
  CAPTURE(m, amx_allowed,
          Int8KernelName(m <= ops::kLinearGemvMaxRows ? Int8GemvKernel() : Int8GemmKernel()));
  const auto xv = testing::RandomNormal(static_cast<size_t>(m * k), rng, 1.f);
  const auto wv = testing::RandomNormal(static_cast<size_t>(n * k), rng, 0.05f);
  const auto bv = testing::RandomNormal(static_cast<size_t>(n), rng, 1.f);
  auto w = ops::QuantizeWeightInt8(test::MakeF32(wv, {n, k}));
  REQUIRE(w.ok());
  const Tensor x = test::MakeF32(xv, {m, k}), bias = test::MakeF32(bv, {n});
  auto y = Tensor::Empty({m, n}, DType::kF32);
  REQUIRE(y.ok());
  REQUIRE(ops::Linear(x, w->q, w->scale, bias, *y).ok());
  // Each operand errs by at most half its step: |Δ(x·w)| ≤ Σ (|x|·sw/2 + |w|·sx/2 + sx·sw/4).
  for (int64_t i = 0; i < m; ++i) {
    double xmax = 0;
    for (int64_t kk = 0; kk < k; ++kk) xmax = std::max(xmax, std::abs(double{xv[i * k + kk]}));
    const double sx = xmax / 127;
    for (int64_t j = 0; j < n; ++j) {
      const double sw = w->scale.data<float>()[j];
      double want = bv[static_cast<size_t>(j)], bound = 1e-5;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double a = xv[static_cast<size_t>(i * k + kk)],
                     b = wv[static_cast<size_t>(j * k + kk)];
        want += a * b;
        bound += std::abs(a) * sw / 2 + std::abs(b) * sx / 2 + sx * sw / 4;
      }
      const double got = y->data<float>()[i * n + j];
      CAPTURE(i, j, want, got, bound);
      REQUIRE(std::abs(got - want) <= bound);
    }
  }
  // Every path (GEMV, AMX) computes the same exact integer sums: the same y up to the epilogue's
  // rounding, so a second shape split gives it too. Check a row against the one-row call.
  auto y1 = Tensor::Empty({1, n}, DType::kF32);
  REQUIRE(y1.ok());
  const Tensor x_last =
      Tensor::View(const_cast<float*>(x.data<float>()) + (m - 1) * k, {1, k}, DType::kF32);
  REQUIRE(ops::Linear(x_last, w->q, w->scale, bias, *y1).ok());
  for (int64_t j = 0; j < n; ++j) {
    const float a = y->data<float>()[(m - 1) * n + j], b = y1->data<float>()[j];
    REQUIRE(std::abs(a - b) <= 1e-5f * (std::abs(a) + 1.f));
  }
}

TEST_CASE("A packed-only int8 weight computes what its row-major weight did after that is freed",
          "[unit][engine][ops]") {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed() + 5);
  const int64_t m = GENERATE(1, 16, 75);  // the GEMV kernel, and the many-row one
  const int64_t n = 70, k = 130;          // partial column and K blocks
  CAPTURE(m);
  const auto xv = testing::RandomNormal(static_cast<size_t>(m * k), rng, 1.f);
  const auto wv = testing::RandomNormal(static_cast<size_t>(n * k), rng, 0.05f);
  const Tensor x = test::MakeF32(xv, {m, k});
  auto want = Tensor::Empty({m, n}, DType::kF32);
  auto got = Tensor::Empty({m, n}, DType::kF32);
  REQUIRE((want.ok() && got.ok()));
  Tensor packed, scale_view;
  std::vector<float> scales;
  {
    auto w = ops::QuantizeWeightInt8(test::MakeF32(wv, {n, k}));
    REQUIRE(w.ok());
    REQUIRE(ops::Linear(x, w->q, w->scale, Tensor(), *want).ok());
    auto kept = ops::PackLinearWeight(w->q, w->scale);
    REQUIRE(kept.ok());
    packed = *kept;
    CHECK(packed.dtype() == DType::kI8);
    CHECK(packed.shape() == w->q.shape());
    CHECK(packed.raw_data() != w->q.raw_data());  // new memory: the packed layout
    scales.assign(w->scale.data<float>(), w->scale.data<float>() + n);
  }  // the row-major codes and their scales are freed here (ASan would see a read of them)
  // The scales may come in any buffer, a view too: the packed form holds its own.
  scale_view = Tensor::View(scales.data(), {n}, DType::kF32);
  REQUIRE(ops::Linear(x, packed, scale_view, Tensor(), *got).ok());
  for (int64_t i = 0; i < m * n; ++i) {
    CAPTURE(i);
    REQUIRE(got->data<float>()[i] == want->data<float>()[i]);  // the same integer sums
  }
  // Packing it again gives the same packed memory back, and 16-bit weights come back as they are.
  auto again = ops::PackLinearWeight(packed, scale_view);
  REQUIRE(again.ok());
  CHECK(again->raw_data() == packed.raw_data());
  auto bf16 = Tensor::Zeros({n, k}, DType::kBF16);
  REQUIRE(bf16.ok());
  auto same = ops::PackLinearWeight(*bf16, Tensor());
  REQUIRE(same.ok());
  CHECK(same->raw_data() == bf16->raw_data());
  // An int8 weight without proper scales is refused naming them.
  auto bad = ops::PackLinearWeight(packed, Tensor());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("weight_scale"));
}

TEST_CASE("Linear refuses int8 weights without their scales, naming them", "[unit][engine][ops]") {
  auto x = Tensor::Zeros({2, 8}, DType::kF32);
  auto w = Tensor::Zeros({4, 8}, DType::kI8);
  auto s = Tensor::Zeros({4}, DType::kF32);
  auto bad_s = Tensor::Zeros({3}, DType::kF32);
  auto y = Tensor::Zeros({2, 4}, DType::kF32);
  REQUIRE((x.ok() && w.ok() && s.ok() && bad_s.ok() && y.ok()));
  const Status no_scale = ops::Linear(*x, *w, Tensor(), *y);
  CHECK(no_scale.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(no_scale.message()), Catch::Contains("int8"));
  const Status wrong = ops::Linear(*x, *w, *bad_s, Tensor(), *y);
  CHECK(wrong.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(wrong.message()), Catch::Contains("weight_scale"));
  CHECK(ops::Linear(*x, *w, *s, Tensor(), *y).ok());
  for (int64_t i = 0; i < 8; ++i) CHECK(y->data<float>()[i] == 0.f);
  // Without a scale the five-argument form is the four-argument one: an int8 weight is refused
  // there too, and a 16-bit or f32 weight runs as it would.
  const Status int8_unscaled = ops::Linear(*x, *w, Tensor(), Tensor(), *y);
  CHECK(int8_unscaled.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(int8_unscaled.message()), Catch::Contains("int8"));
  auto ones = Tensor::Zeros({4, 8}, DType::kF32);
  auto xs = Tensor::Zeros({2, 8}, DType::kF32);
  REQUIRE((ones.ok() && xs.ok()));
  std::fill_n(ones->data<float>(), 32, 1.0f);
  std::fill_n(xs->data<float>(), 16, 0.5f);
  REQUIRE(ops::Linear(*xs, *ones, Tensor(), Tensor(), *y).ok());
  for (int64_t i = 0; i < 8; ++i) CHECK(y->data<float>()[i] == 4.f);  // 8 · 0.5 · 1
}

}  // namespace
}  // namespace framezip::engine::ops::cpu
