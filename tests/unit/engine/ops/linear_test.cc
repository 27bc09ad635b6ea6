// Linear and MatMul on every device present against f64 GEMMs
// (tests/unit/engine/ops/device_cases.h).
//
// What each device rounds, and so what its reference models:
//   CPU:  x stays f32 and products are summed in f32; the AMX path (bf16 weights, more rows than
//         kLinearGemvMaxRows, an AMX CPU) rounds x to bf16 first (engine/ops/gemm_amx.h).
//   CUDA: f32 weights: a full-f32 cuBLAS GEMM (no TF32). 16-bit weights: x is rounded to the
//         weight's dtype on the device (the same rounding as ops::Cast), then a tensor-core GEMM
//         accumulates in f32 (engine/ops/linear_cuda.cc).
// With those roundings in the reference only the summation differs: f32 order on the CPU
// (1e-4 abs + 1e-4 rel, sums of order 1-3); tensor-core accumulation, which is not specified to
// be IEEE f32, gets 1e-3 of the output's RMS per element and 2e-4 in relative L2. An unmodelled
// rounding of x (2^-9 per product) would err by ~1e-3 RMS in L2 and fail that.
#include "engine/ops/linear.h"

#include <catch2/catch.hpp>
#include <optional>

#include "engine/core/thread_pool.h"
#include "engine/ops/gemm_amx.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

// The dtype x is rounded to before the products on `device`, f32 when it is not.
DType XRoundingOf(const Device& device, DType weight_dtype, int64_t rows) {
  if (device.is_cpu()) {
    const bool amx = ops::cpu::AmxGemmEnabled() && weight_dtype == DType::kBF16 &&
                     rows > ops::kLinearGemvMaxRows;
    return amx ? DType::kBF16 : DType::kF32;
  }
  return weight_dtype;
}

void CheckGemm(const Device& device, DType operand_dtype, const Tensor& got,
               const std::vector<double>& want) {
  if (device.is_cpu() || operand_dtype == DType::kF32) {
    CheckCloseTo(got, want, {1e-4, 1e-4});
  } else {
    CheckWithinRmsOf(got, want, {1e-3, 2e-4});
  }
}

// y[i, j] = b[j] + Σ x[i, k]·w[j, k] in f64.
std::vector<double> LinearReference(const std::vector<double>& x, const std::vector<double>& w,
                                    const std::vector<double>* bias, int64_t m, int64_t n,
                                    int64_t k) {
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? (*bias)[j] : 0;
      for (int64_t kk = 0; kk < k; ++kk) s += x[i * k + kk] * w[j * k + kk];
      y[i * n + j] = s;
    }
  }
  return y;
}

TEST_CASE("Linear matches f64 on every device: f32/bf16/f16 weights, GEMV, GEMM and AMX paths",
          "[unit][engine][ops][devices]") {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const DType wdtype = GENERATE(DType::kF32, DType::kBF16, DType::kF16);
  const int64_t m = GENERATE(1, 3, 5, 16, 17, 64, 75, 300);
  const bool with_bias = GENERATE(false, true);
  const bool amx_allowed = GENERATE(true, false);
  // 300 x 133: N spans two sgemm tiles, K has a SIMD tail and is odd (cuBLAS leading dims);
  // 1 x 37: a single output. On two threads 75 rows with one column tile run as two row tiles
  // (38 + 37), and 300 rows as 150 + 150. 40 x 600: a 16-bit weight that long stays on the GEMV
  // kernel up to 64 rows without AMX (17 and 64 here), sgemm past them.
  const auto [n, k] =
      GENERATE(std::pair<int64_t, int64_t>{300, 133}, std::pair<int64_t, int64_t>{1, 37},
               std::pair<int64_t, int64_t>{40, 600});
  std::optional<ops::cpu::ScopedF32Gemm> f32_gemm;
  if (!amx_allowed) f32_gemm.emplace();
  CAPTURE(DTypeName(wdtype), m, n, k, with_bias, amx_allowed);
  const auto x = MakeRandom({m, k}, DType::kF32, rng);
  const auto w = MakeRandom({n, k}, wdtype, rng, 0.2f);
  const auto b = MakeRandom({n}, wdtype, rng);
  ForEachDevice([&](const Device& device) {
    const DType x_rounding = XRoundingOf(device, wdtype, amx_allowed ? m : 0);
    const std::vector<double> want = LinearReference(RoundedTo(x.values, x_rounding), w.values,
                                                     with_bias ? &b.values : nullptr, m, n, k);
    Tensor y = PoisonedOn({m, n}, device);
    const Status st = ops::Linear(On(x.tensor, device), On(w.tensor, device),
                                  with_bias ? On(b.tensor, device) : Tensor(), y);
    INFO(st.ToString());
    REQUIRE(st.ok());
    CheckGemm(device, wdtype, y, want);
  });
}

TEST_CASE("Linear with no rows or an empty inner dimension gives nothing, or the bias",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const DType wdtype = GENERATE(DType::kF32, DType::kBF16);
  const int64_t m = GENERATE(0, 5, 40);  // no rows, the GEMV path, the many-row path
  const int64_t n = 9;
  const auto w = MakeRandom({n, 0}, wdtype, rng);
  const auto b = MakeRandom({n}, DType::kF32, rng);
  ForEachDevice([&](const Device& device) {
    Tensor y = PoisonedOn({m, n}, device);
    REQUIRE(
        ops::Linear(On(MakeEmpty({m, 0}), device), On(w.tensor, device), On(b.tensor, device), y)
            .ok());
    std::vector<double> want;
    for (int64_t i = 0; i < m; ++i) want.insert(want.end(), b.values.begin(), b.values.end());
    CheckCloseTo(y, want, {0.0, 0.0});
    Tensor no_bias = PoisonedOn({m, n}, device);
    REQUIRE(
        ops::Linear(On(MakeEmpty({m, 0}), device), On(w.tensor, device), Tensor(), no_bias).ok());
    CheckCloseTo(no_bias, std::vector<double>(static_cast<size_t>(m * n), 0.0), {0.0, 0.0});
  });
}

TEST_CASE("Linear rejects mismatched shapes on every device, naming them",
          "[unit][engine][ops][devices]") {
  ForEachDevice([&](const Device& device) {
    Tensor x = PoisonedOn({2, 8}, device), w = PoisonedOn({4, 7}, device);
    Tensor y = PoisonedOn({2, 4}, device);
    const Status s = ops::Linear(x, w, Tensor(), y);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(s), Catch::Contains("[4, 7]"));
  });
}

// c[e, i, j] = Σ a[e, i, k]·b[e or 0, k, j] (b transposed: b[.., j, k]) in f64.
std::vector<double> MatMulReference(const std::vector<double>& a, const std::vector<double>& b,
                                    int64_t entries, bool shared_b, bool transpose, int64_t m,
                                    int64_t k, int64_t n) {
  std::vector<double> c(static_cast<size_t>(entries * m * n));
  for (int64_t e = 0; e < entries; ++e) {
    const double* ae = a.data() + e * m * k;
    const double* be = b.data() + (shared_b ? 0 : e * k * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          s += ae[i * k + kk] * (transpose ? be[j * k + kk] : be[kk * n + j]);
        }
        c[static_cast<size_t>((e * m + i) * n + j)] = s;
      }
    }
  }
  return c;
}

TEST_CASE("MatMul matches f64 on every device, plain and transposed",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const bool transpose = GENERATE(false, true);
  const int64_t m = 270, k = 65, n = 261;
  const auto a = MakeRandom({m, k}, DType::kF32, rng);
  const auto b = MakeRandom(transpose ? Shape{n, k} : Shape{k, n}, DType::kF32, rng);
  const auto want = MatMulReference(a.values, b.values, 1, true, transpose, m, k, n);
  ForEachDevice([&](const Device& device) {
    Tensor c = PoisonedOn({m, n}, device);
    REQUIRE(ops::MatMul(On(a.tensor, device), On(b.tensor, device), transpose, c).ok());
    CheckCloseTo(c, want, {1e-4, 1e-5});
  });
}

TEST_CASE("MatMul batches over leading dims, shares a rank-2 b, takes 16-bit operands",
          "[unit][engine][ops][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const bool transpose = GENERATE(false, true);
  const bool shared_b = GENERATE(false, true);
  const DType dtype = GENERATE(DType::kF32, DType::kBF16, DType::kF16);
  const int64_t batch0 = 2, batch1 = 3, m = 19, k = 40, n = 23;
  CAPTURE(transpose, shared_b, DTypeName(dtype));
  const auto a = MakeRandom({batch0, batch1, m, k}, dtype, rng);
  const Shape b_mat = transpose ? Shape{n, k} : Shape{k, n};
  const auto b =
      MakeRandom(shared_b ? b_mat : Shape{batch0, batch1, b_mat[0], b_mat[1]}, dtype, rng);
  // On the operands' (rounded) values: 16-bit products are exact in f32.
  const auto want =
      MatMulReference(a.values, b.values, batch0 * batch1, shared_b, transpose, m, k, n);
  ForEachDevice([&](const Device& device) {
    Tensor c = PoisonedOn({batch0, batch1, m, n}, device);
    REQUIRE(ops::MatMul(On(a.tensor, device), On(b.tensor, device), transpose, c).ok());
    CheckGemm(device, dtype, c, want);
  });
}

TEST_CASE("MatMul over an empty inner dimension gives zeros on every device",
          "[unit][engine][ops][devices]") {
  ForEachDevice([&](const Device& device) {
    Tensor c = PoisonedOn({2, 3, 4}, device);
    REQUIRE(ops::MatMul(On(MakeEmpty({2, 3, 0}), device), On(MakeEmpty({0, 4}), device), false, c)
                .ok());
    CheckCloseTo(c, std::vector<double>(24, 0.0), {0.0, 0.0});
  });
}

TEST_CASE("MatMul names operands that do not chain or mix dtypes, on every device",
          "[unit][engine][ops][devices]") {
  ForEachDevice([&](const Device& device) {
    Tensor a = PoisonedOn({2, 3, 4}, device), c = PoisonedOn({2, 3, 5}, device);
    const Status batch = ops::MatMul(a, PoisonedOn({3, 4, 5}, device), false, c);
    CHECK(batch.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(batch), Catch::Contains("[3, 4, 5]"));
    const Tensor b16 = PoisonedOn({4, 5}, device, DType::kBF16);
    CHECK(ops::MatMul(a, b16, false, c).code() == absl::StatusCode::kInvalidArgument);
    CHECK(ops::MatMul(PoisonedOn({4}, device), b16, false, c).code() ==
          absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace framezip::engine::test
