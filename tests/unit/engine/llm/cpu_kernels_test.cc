// The vectorised loops of engine/ops/cpu_kernels.h, every ISA build this CPU can run (AVX2,
// AVX-512) and the dispatched entry points, against f64 references on fresh random inputs.
#include "engine/ops/cpu_kernels.h"

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/half.h"
#include "engine/ops/cpu_isa.h"
#include "engine/ops/cpu_kernels_isa.h"
#include "engine/ops/kv_quant.h"
#include "tests/testing/random.h"

namespace framezip::engine::ops::cpu {
namespace {

// One ISA's loops, callable side by side.
struct Kernels {
  std::string isa;
  std::function<void(const void*, DType, int64_t, float*)> to_f32;
  std::function<float(const float*, const float*, int64_t)> dot;
  std::function<float(const float*, int64_t)> sum;
  std::function<void(float, const float*, int64_t, float*)> axpy;
  std::function<void(const float*, int64_t, int64_t, const void*, DType, int64_t, int64_t, int64_t,
                     float*, int64_t)>
      gemv_rows;
  std::function<float(float*, int64_t, float)> exp_shift_sum;
  std::function<void(const float*, const float*, int64_t, float*)> silu_mul;
  std::function<void(const float*, int64_t, float*)> gelu_tanh, gelu_erf;
};

std::vector<Kernels> KernelsOfThisCpu() {
  std::vector<Kernels> out = {{"dispatched (" + KernelIsa() + ")", ToF32, Dot, Sum, Axpy, GemvRows,
                               ExpShiftSum, SiluMul, GeluTanh, GeluErf}};
  if (DetectedIsa().avx2) {
    out.push_back({"avx2", avx2::ToF32, avx2::Dot, avx2::Sum, avx2::Axpy, avx2::GemvRows,
                   avx2::ExpShiftSum, avx2::SiluMul, avx2::GeluTanh, avx2::GeluErf});
  }
  if (DetectedIsa().avx512f) {
    out.push_back({"avx512", avx512::ToF32, avx512::Dot, avx512::Sum, avx512::Axpy,
                   avx512::GemvRows, avx512::ExpShiftSum, avx512::SiluMul, avx512::GeluTanh,
                   avx512::GeluErf});
  } else {
    WARN("SKIPPED: the AVX-512 loops (this CPU has no AVX-512F; they are tested where it has)");
  }
  return out;
}

// Weights of `dtype` holding rounded normal values, and those values as f64.
struct Weights {
  std::vector<uint16_t> half_bits;  // bf16 or f16
  std::vector<float> f32;
  std::vector<double> values;
  DType dtype = DType::kF32;
  const void* data() const {
    return dtype == DType::kF32 ? static_cast<const void*>(f32.data())
                                : static_cast<const void*>(half_bits.data());
  }
};

Weights RandomWeights(int64_t n, DType dtype, std::mt19937_64& rng) {
  Weights w;
  w.dtype = dtype;
  const std::vector<float> v = testing::RandomNormal(static_cast<size_t>(n), rng);
  for (float x : v) {
    if (dtype == DType::kBF16) {
      const BFloat16 b = F32ToBF16(x);
      w.half_bits.push_back(b.bits);
      w.values.push_back(BF16ToF32(b));
    } else if (dtype == DType::kF16) {
      const Float16 h = F32ToF16(x);
      w.half_bits.push_back(h.bits);
      w.values.push_back(F16ToF32(h));
    } else {
      w.f32.push_back(x);
      w.values.push_back(x);
    }
  }
  return w;
}

const char* NameOf(DType t) {
  return t == DType::kBF16 ? "bf16" : t == DType::kF16 ? "f16" : "f32";
}

TEST_CASE("ToF32 converts bf16 and f16 exactly on every ISA", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  for (const Kernels& k : KernelsOfThisCpu()) {
    for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (int64_t n : {1, 15, 16, 33, 1000}) {
        CAPTURE(k.isa, NameOf(t), n);
        const Weights w = RandomWeights(n, t, rng);
        std::vector<float> got(static_cast<size_t>(n), -1.f);
        k.to_f32(w.data(), t, n, got.data());
        for (int64_t i = 0; i < n; ++i) REQUIRE(got[i] == static_cast<float>(w.values[i]));
      }
    }
  }
}

TEST_CASE("Dot, Sum and Axpy match f64 on every ISA", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  for (const Kernels& k : KernelsOfThisCpu()) {
    for (int64_t n : {1, 7, 8, 16, 31, 32, 33, 896, 4867}) {
      CAPTURE(k.isa, n);
      const std::vector<float> a = testing::RandomNormal(n, rng), b = testing::RandomNormal(n, rng);
      double want = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        want += double{a[i]} * b[i];
        magnitude += std::abs(double{a[i]} * b[i]);
      }
      CHECK(std::abs(k.dot(a.data(), b.data(), n) - want) <= 1e-6 * magnitude + 1e-30);
      double sum = 0, sum_magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        sum += a[i];
        sum_magnitude += std::abs(double{a[i]});
      }
      CHECK(std::abs(k.sum(a.data(), n) - sum) <= 1e-6 * sum_magnitude + 1e-30);
      std::vector<float> y = b;
      const float alpha = 0.37f;
      k.axpy(alpha, a.data(), n, y.data());
      for (int64_t i = 0; i < n; ++i) {
        REQUIRE(std::abs(y[i] - (double{b[i]} + double{alpha} * a[i])) <=
                1e-6 * (std::abs(b[i]) + std::abs(alpha * a[i])));
      }
    }
  }
}

TEST_CASE("GemvRows matches f64 for every weight type, batch and row range on every ISA",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  struct Shape {
    int64_t M, K, N, j0, j1;
  };
  // Batches 1-4 take each register-block path, 5-16 the groups of 4 plus a rest; K below and
  // above a multiple of the lanes takes the scalar tails; [j0, j1) not a multiple of the rows per
  // block takes the single-row path, and 60 rows cover more than one 24-row block (prefetch).
  const std::vector<Shape> shapes = {{1, 64, 30, 0, 30},   {2, 37, 29, 3, 29},  {3, 96, 60, 0, 60},
                                     {4, 17, 25, 1, 24},   {5, 128, 50, 0, 50}, {7, 200, 33, 5, 33},
                                     {16, 896, 72, 0, 72}, {13, 40, 49, 2, 47}};
  for (const Kernels& k : KernelsOfThisCpu()) {
    for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (const Shape& s : shapes) {
        CAPTURE(k.isa, NameOf(t), s.M, s.K, s.N, s.j0, s.j1);
        const Weights w = RandomWeights(s.N * s.K, t, rng);
        const int64_t ldx = s.K + 3, ldy = s.N + 2;
        const std::vector<float> x = testing::RandomNormal(s.M * ldx, rng);
        std::vector<float> y(static_cast<size_t>(s.M * ldy), 1e30f);
        k.gemv_rows(x.data(), s.M, ldx, w.data(), t, s.K, s.j0, s.j1, y.data(), ldy);
        for (int64_t m = 0; m < s.M; ++m) {
          for (int64_t j = 0; j < s.N; ++j) {
            const float got = y[m * ldy + j];
            if (j < s.j0 || j >= s.j1) {
              REQUIRE(got == 1e30f);  // rows outside [j0, j1) are not written
              continue;
            }
            double want = 0, magnitude = 0;
            for (int64_t kk = 0; kk < s.K; ++kk) {
              want += x[m * ldx + kk] * w.values[j * s.K + kk];
              magnitude += std::abs(x[m * ldx + kk] * w.values[j * s.K + kk]);
            }
            REQUIRE(std::abs(got - want) <= 2e-6 * magnitude);
          }
        }
      }
    }
  }
}

TEST_CASE("GemvRows gives each row the same bits whatever the batch on every ISA",
          "[unit][engine][ops]") {
  // Batched decode must not change a sequence's logits: a row computed in a batch of 16 equals
  // the row computed alone.
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t M = 16, K = 160, N = 53;
  for (const Kernels& k : KernelsOfThisCpu()) {
    CAPTURE(k.isa);
    const Weights w = RandomWeights(N * K, DType::kBF16, rng);
    const std::vector<float> x = testing::RandomNormal(M * K, rng);
    std::vector<float> batched(M * N), alone(N);
    k.gemv_rows(x.data(), M, K, w.data(), DType::kBF16, K, 0, N, batched.data(), N);
    for (int64_t m = 0; m < M; ++m) {
      k.gemv_rows(x.data() + m * K, 1, K, w.data(), DType::kBF16, K, 0, N, alone.data(), N);
      for (int64_t j = 0; j < N; ++j) REQUIRE(batched[m * N + j] == alone[j]);
    }
  }
}

TEST_CASE("ExpShiftSum matches f64 exp on every ISA, -inf giving 0", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_real_distribution<float> value(-100.f, 10.f);
  for (const Kernels& k : KernelsOfThisCpu()) {
    for (int64_t n : {1, 9, 16, 40, 1001}) {
      CAPTURE(k.isa, n);
      std::vector<float> s(static_cast<size_t>(n));
      for (float& v : s) v = value(rng);
      s[n / 2] = -std::numeric_limits<float>::infinity();
      const float max = 10.f;
      std::vector<double> want(s.size());
      double want_sum = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        // The kernels subtract in f32 (s - max rounds to the ulp of |s - max|, 8e-6 near -64):
        // the reference takes the same rounded difference and checks the exp itself.
        want[i] = std::isinf(s[i]) ? 0.0 : std::exp(double{s[i] - max});
        want_sum += want[i];
      }
      const float sum = k.exp_shift_sum(s.data(), n, max);
      for (size_t i = 0; i < s.size(); ++i) {
        // Cephes expf: ~2 ulp; below e^-87 the SIMD paths flush to 0 (values under 1.7e-38).
        REQUIRE(std::abs(s[i] - want[i]) <= 4e-7 * want[i] + 1e-37);
      }
      CHECK(std::abs(sum - want_sum) <= 1e-6 * want_sum + 1e-37);
    }
  }
}

TEST_CASE("SiluMul, GeluTanh and GeluErf match f64 on every ISA, tails included",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  for (const Kernels& k : KernelsOfThisCpu()) {
    for (int64_t n : {1, 5, 16, 37, 4096 + 11}) {
      CAPTURE(k.isa, n);
      // Wide inputs (σ = 6) reach the saturated ends; a few exact extremes are added.
      std::vector<float> x = testing::RandomNormal(n, rng, 6.f);
      const std::vector<float> u = testing::RandomNormal(n, rng, 2.f);
      if (n > 4) x[0] = 0.f, x[1] = -120.f, x[2] = 120.f, x[3] = -3.5f;
      std::vector<float> y(static_cast<size_t>(n));
      k.silu_mul(x.data(), u.data(), n, y.data());
      for (int64_t i = 0; i < n; ++i) {
        // Relative 1e-6, and for negative x an absolute f32 rounding of x·u: σ(x) ≈ e^x there,
        // whose relative error grows with |x| (the argument's own rounding).
        const double v = x[i], want = v / (1 + std::exp(-v)) * u[i];
        REQUIRE(std::abs(y[i] - want) <= 1e-6 * std::abs(want) + 1e-7 * std::abs(v * u[i]));
      }
      k.gelu_tanh(x.data(), n, y.data());
      for (int64_t i = 0; i < n; ++i) {
        // x/2 · (1 + tanh(u)) = x / (1 + e^(-2u)): the second form keeps f64's precision where
        // 1 + tanh(u) cancels (x below about -5).
        const double v = x[i], u = std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
        const double want = v / (1 + std::exp(-2 * u));
        // Relative 1e-6, and absolute f32 rounding of x (the portable path's 1 + tanh cancels).
        REQUIRE(std::abs(y[i] - want) <= 1e-6 * std::abs(want) + 1e-7 * std::abs(v));
      }
      k.gelu_erf(x.data(), n, y.data());
      for (int64_t i = 0; i < n; ++i) {
        const double v = x[i], want = 0.5 * v * std::erfc(-v / std::sqrt(2.0));
        INFO("x " << v << " got " << y[i] << " want " << want);
        // erf's approximation error times |x|/2, plus f32 rounding of the result. The
        // approximation (Abramowitz-Stegun 7.1.26) is within 1.5e-7 in exact arithmetic; evaluated
        // in f32 its polynomial and exp(-z²) add up to about 1.2e-7 more (seen: 1.03e-8 at
        // x = -0.038 against a 1.5e-7 bound of 1.03e-8), so 3e-7.
        REQUIRE(std::abs(y[i] - want) <= 3e-7 * 0.5 * std::abs(v) + 4e-7 * std::abs(want) + 1e-30);
      }
    }
  }
}

TEST_CASE("Max equals std::max_element on every ISA, -inf rows and empty ranges included",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  using Fn = float (*)(const float*, int64_t);
  std::vector<std::pair<std::string, Fn>> paths = {{"dispatched", Max}};
  if (DetectedIsa().avx2) paths.push_back({"avx2", avx2::Max});
  if (DetectedIsa().avx512f) paths.push_back({"avx512", avx512::Max});
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& [name, fn] : paths) {
    CAPTURE(name);
    CHECK(fn(nullptr, 0) == -inf);
    for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 32, 33, 100, 1027}) {
      CAPTURE(n);
      std::vector<float> x = testing::RandomNormal(n, rng);
      for (size_t i = 0; i < x.size(); i += 3) x[i] = -inf;  // masked scores
      REQUIRE(fn(x.data(), n) == *std::max_element(x.begin(), x.end()));
      std::fill(x.begin(), x.end(), -inf);
      REQUIRE(fn(x.data(), n) == -inf);
    }
  }
}

TEST_CASE("ToF16 equals F32ToF16 bit for bit on every ISA, NaN, infinities and subnormals too",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  // Normal values at several scales, f16 subnormals and overflow, and exact ties between two f16
  // (a 10-bit mantissa plus a half step), where round-to-nearest-even decides.
  std::vector<float> x;
  for (const float scale : {1.f, 1e-3f, 3e-6f, 6e-8f, 7e4f}) {
    const auto v = testing::RandomNormal(61, rng, scale);
    x.insert(x.end(), v.begin(), v.end());
  }
  std::uniform_int_distribution<uint32_t> mantissa(0, 1023);
  for (int i = 0; i < 40; ++i) {
    const uint32_t exponent = static_cast<uint32_t>(123 + i % 8);
    const uint32_t bits = (exponent << 23) | (mantissa(rng) << 13) | 0x1000u;
    x.push_back(std::bit_cast<float>(bits));
  }
  // Specials (a NaN with a payload among them), at the end and again at the front, where they
  // fall in whole vectors rather than in the scalar tail.
  const std::vector<float> specials = {0.f,
                                       -0.f,
                                       65504.f,
                                       65520.f,
                                       -65520.f,
                                       1e-45f,
                                       5.9604645e-8f,
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       std::numeric_limits<float>::quiet_NaN(),
                                       std::bit_cast<float>(0xffc12345u)};
  x.insert(x.end(), specials.begin(), specials.end());
  x.insert(x.begin(), specials.begin(), specials.end());
  using Fn = void (*)(const float*, int64_t, Float16*);
  std::vector<std::pair<std::string, Fn>> paths = {{"dispatched", ToF16}};
  if (DetectedIsa().avx2) paths.push_back({"avx2", avx2::ToF16});
  if (DetectedIsa().avx512f) paths.push_back({"avx512", avx512::ToF16});
  for (const auto& [name, fn] : paths) {
    for (const size_t n : {size_t{1}, size_t{15}, size_t{16}, x.size()}) {
      CAPTURE(name, n);
      std::vector<Float16> got(n, Float16{0xdead});
      fn(x.data(), static_cast<int64_t>(n), got.data());
      for (size_t i = 0; i < n; ++i) {
        CAPTURE(i, x[i]);
        REQUIRE(got[i].bits == F32ToF16(x[i]).bits);
      }
    }
  }
}

TEST_CASE("QuantizeCodes equals kvq::QuantizeOne bit for bit on every ISA", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t n_max = 70;
  const std::vector<float> x = testing::RandomNormal(n_max, rng, 3.f);
  std::vector<float> scale = testing::RandomNormal(n_max, rng, 0.5f);
  std::vector<float> zero = testing::RandomNormal(n_max, rng, 2.f);
  for (float& s : scale) s = std::abs(s);
  scale[3] = 0.f;      // a constant channel: code 0
  scale[20] = -0.25f;  // never stored, but the scalar rule maps it to 0 as well
  using Fn = void (*)(const float*, const float*, const float*, int64_t, int64_t, int, uint8_t*);
  std::vector<std::pair<std::string, Fn>> paths = {{"dispatched", QuantizeCodes}};
  if (DetectedIsa().avx2) paths.push_back({"avx2", avx2::QuantizeCodes});
  if (DetectedIsa().avx512f) paths.push_back({"avx512", avx512::QuantizeCodes});
  for (const auto& [name, fn] : paths) {
    for (const int bits : {2, 4}) {
      for (const int64_t stride : {int64_t{0}, int64_t{1}}) {
        for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{32}, n_max}) {
          CAPTURE(name, bits, stride, n);
          std::vector<uint8_t> codes(static_cast<size_t>(n), 0xee);
          fn(x.data(), scale.data(), zero.data(), stride, n, bits, codes.data());
          for (int64_t i = 0; i < n; ++i) {
            CAPTURE(i);
            REQUIRE(codes[i] == kvq::QuantizeOne(x[i], scale[i * stride], zero[i * stride], bits));
          }
        }
      }
    }
  }
  // Not all one code: the inputs spread over the levels.
  std::vector<uint8_t> codes(n_max);
  QuantizeCodes(x.data(), scale.data(), zero.data(), 1, n_max, 4, codes.data());
  CHECK(std::set<uint8_t>(codes.begin(), codes.end()).size() >= 4);
}

TEST_CASE("DequantizeInt4Row gives each code minus 8 times its scale, bit for bit, on every ISA",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> packed(100);
  for (uint8_t& b : packed) b = static_cast<uint8_t>(byte(rng));
  const std::vector<float> scale = testing::RandomNormal(70, rng);
  using Fn = void (*)(const uint8_t*, int64_t, int64_t, const float*, float*);
  std::vector<std::pair<std::string, Fn>> paths = {{"dispatched", DequantizeInt4Row}};
  if (DetectedIsa().avx2) paths.push_back({"avx2", avx2::DequantizeInt4Row});
  if (DetectedIsa().avx512f) paths.push_back({"avx512", avx512::DequantizeInt4Row});
  for (const auto& [name, fn] : paths) {
    for (int64_t first : {0, 2, 6, 1, 7}) {
      if (first % 2 == 1 && name != "dispatched") continue;  // the ISA builds need even `first`
      for (int64_t n : {1, 8, 15, 16, 33, 64}) {
        CAPTURE(name, first, n);
        std::vector<float> out(static_cast<size_t>(n), -99.f);
        fn(packed.data(), first, n, scale.data(), out.data());
        for (int64_t c = 0; c < n; ++c) {
          const int64_t i = first + c;
          const int code = i % 2 == 0 ? packed[i / 2] & 0x0f : packed[i / 2] >> 4;
          REQUIRE(out[c] == static_cast<float>(code - 8) * scale[c]);
        }
      }
    }
  }
}

TEST_CASE("WeightedRowsSum matches f64 on every ISA, each row read only up to its rank",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  using Fn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, const uint16_t*,
                      int64_t, float*);
  std::vector<std::pair<std::string, Fn>> paths = {{"dispatched", WeightedRowsSum}};
  if (DetectedIsa().avx2) paths.push_back({"avx2", avx2::WeightedRowsSum});
  if (DetectedIsa().avx512f) paths.push_back({"avx512", avx512::WeightedRowsSum});
  for (const auto& [name, fn] : paths) {
    // Ranks that fill, split and miss vectors of 8 and 16 lanes; heads past a group of four.
    for (int64_t rank : {1, 4, 16, 20, 40}) {
      for (int64_t heads : {1, 4, 7}) {
        const int64_t n = 53, ldw = n + 5;
        CAPTURE(name, rank, heads);
        const std::vector<float> w = testing::RandomNormal(static_cast<size_t>(heads * ldw), rng);
        std::vector<float> u = testing::RandomNormal(static_cast<size_t>(n * rank), rng);
        std::uniform_int_distribution<int> pick(0, static_cast<int>(rank));
        std::vector<uint16_t> ranks(static_cast<size_t>(n));
        for (uint16_t& r : ranks) r = static_cast<uint16_t>(pick(rng));
        ranks[0] = static_cast<uint16_t>(rank);
        ranks[1] = 0;
        // Entries past a row's rank are NaN: reading one would poison the sums.
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = ranks[i]; j < rank; ++j) u[i * rank + j] = std::nanf("");
        }
        const std::vector<float> z0 = testing::RandomNormal(static_cast<size_t>(heads * rank), rng);
        std::vector<float> z = z0;
        fn(w.data(), ldw, heads, u.data(), rank, ranks.data(), n, z.data());
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t j = 0; j < rank; ++j) {
            double want = z0[h * rank + j], mass = std::fabs(want);
            for (int64_t i = 0; i < n; ++i) {
              if (j >= ranks[i]) continue;
              want += double{w[h * ldw + i]} * u[i * rank + j];
              mass += std::fabs(double{w[h * ldw + i]} * u[i * rank + j]);
            }
            CAPTURE(h, j, z[h * rank + j], want);
            REQUIRE(std::fabs(z[h * rank + j] - want) <= 1e-6 * mass);
          }
        }
      }
    }
  }
}

TEST_CASE("The AVX2 and AVX-512 builds give the same bits for element-wise loops",
          "[unit][engine][ops]") {
  // Same operations per lane in the same order: only the width differs.
  if (!DetectedIsa().avx512f) {
    std::cout << "SKIPPED: no AVX-512F on this CPU to compare with AVX2" << std::endl;
    return;
  }
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t n = 1000 + 7;
  const std::vector<float> x = testing::RandomNormal(n, rng, 6.f);
  const std::vector<float> u = testing::RandomNormal(n, rng);
  std::vector<float> a(n), b(n);
  avx2::SiluMul(x.data(), u.data(), n, a.data());
  avx512::SiluMul(x.data(), u.data(), n, b.data());
  CHECK(a == b);
  avx2::GeluTanh(x.data(), n, a.data());
  avx512::GeluTanh(x.data(), n, b.data());
  CHECK(a == b);
  avx2::GeluErf(x.data(), n, a.data());
  avx512::GeluErf(x.data(), n, b.data());
  CHECK(a == b);
  a = x, b = x;
  avx2::ExpShiftSum(a.data(), n, 20.f);
  avx512::ExpShiftSum(b.data(), n, 20.f);
  for (int64_t i = 0; i < n / 16 * 16; ++i) REQUIRE(a[i] == b[i]);  // scalar tails differ in ISA
}

}  // namespace
}  // namespace framezip::engine::ops::cpu
