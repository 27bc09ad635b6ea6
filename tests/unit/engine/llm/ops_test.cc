// Every CPU op against a straightforward f64 reference on fresh random inputs.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>

#include "engine/core/thread_pool.h"
#include "engine/ops/activation.h"
#include "engine/ops/amx_weight_cache.h"
#include "engine/ops/attention.h"
#include "engine/ops/embedding.h"
#include "engine/ops/gemm_amx.h"
#include "engine/ops/layer_norm.h"
#include "engine/ops/linear.h"
#include "engine/ops/rms_norm.h"
#include "engine/ops/rope.h"
#include "engine/ops/rope_table.h"
#include "engine/ops/row_slices.h"
#include "engine/ops/softmax.h"
#include "fmt/format.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine {
namespace {

using test::MakeEmpty;
using test::MakeRandom;
using test::RequireClose;

TEST_CASE("Linear with no rows or an empty inner dimension: nothing, or the bias",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const DType wdtype = GENERATE(DType::kF32, DType::kBF16);
  const int64_t m = GENERATE(0, 5, 40);  // no rows, the GEMV path, the many-row path
  const int64_t k = GENERATE(0, 7);
  CAPTURE(DTypeName(wdtype), m, k);
  const int64_t n = 9;
  auto x = MakeRandom({m, k}, DType::kF32, rng);
  auto w = MakeRandom({n, k}, wdtype, rng);
  auto b = MakeRandom({n}, DType::kF32, rng);
  Tensor y = MakeEmpty({m, n});
  REQUIRE(ops::Linear(x.tensor, w.tensor, b.tensor, y).ok());
  if (k > 0) return;  // the rows' values are the main test's; here: no crash for m = 0
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) CHECK(y.data<float>()[i * n + j] == b.values[j]);
  }
}

TEST_CASE("Linear matches f64 for f32/bf16/f16 weights, GEMV, sgemm and AMX paths",
          "[unit][engine][ops]") {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const DType wdtype = GENERATE(DType::kF32, DType::kBF16, DType::kF16);
  const int64_t m = GENERATE(1, 3, 5, 16, 17, 300);
  const bool with_bias = GENERATE(false, true);
  const bool amx_allowed = GENERATE(true, false);
  const int64_t n = 300, k = 133;  // N spans two sgemm tiles; K has a SIMD tail
  std::optional<ops::cpu::ScopedF32Gemm> f32_gemm;
  if (!amx_allowed) f32_gemm.emplace();
  // The AMX path (bf16 weights, many rows, an AMX CPU) rounds x to bf16 first: its reference
  // sees the rounded x, so the other paths' exact x would fail it, and the reverse.
  const bool amx = amx_allowed && ops::cpu::AmxGemmEnabled() && wdtype == DType::kBF16 &&
                   m > ops::kLinearGemvMaxRows;
  CAPTURE(DTypeName(wdtype), m, with_bias, amx);
  auto x = MakeRandom({m, k}, DType::kF32, rng);
  auto w = MakeRandom({n, k}, wdtype, rng, 0.2f);
  auto b = MakeRandom({n}, wdtype, rng);
  Tensor y = MakeEmpty({m, n});
  REQUIRE(ops::Linear(x.tensor, w.tensor, with_bias ? b.tensor : Tensor(), y).ok());
  std::vector<double> want(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = with_bias ? b.values[j] : 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double xv = x.values[i * k + kk];
        s += (amx ? BF16ToF32(F32ToBF16(static_cast<float>(xv))) : xv) * w.values[j * k + kk];
      }
      want[i * n + j] = s;
    }
  }
  RequireClose(y, want, 1e-4, 1e-4);
}

TEST_CASE("Linear's AMX path packs a weight once, and anew when its memory changes hands",
          "[unit][engine][ops]") {
  if (!ops::cpu::AmxGemmEnabled()) {
    std::cout << "SKIPPED: no AMX on this CPU/OS (the packed-weight cache serves the AMX path)"
              << std::endl;
    return;
  }
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t m = 40, n = 300, k = 133;  // a partial last strip of 128 columns
  auto x = MakeRandom({m, k}, DType::kF32, rng);
  std::vector<float> w_values = testing::RandomNormal(static_cast<size_t>(n * k), rng, 0.2f);
  std::vector<uint16_t> storage(static_cast<size_t>(n * k));
  const auto fill = [&] {
    for (size_t i = 0; i < storage.size(); ++i) storage[i] = F32ToBF16(w_values[i]).bits;
  };
  fill();
  // An owning buffer over `storage` (its own ownership, so the cache can see it go), and a view
  // of the same memory, which Linear packs on every call: the reference layout.
  const auto owning = [&] {
    Buffer b = Buffer::Adopt(std::shared_ptr<void>(storage.data(), [](void*) {}),
                             storage.size() * sizeof(uint16_t), Device::Cpu());
    auto t = Tensor::FromBuffer(std::move(b), 0, {n, k}, DType::kBF16);
    REQUIRE(t.ok());
    return *t;
  };
  const Tensor view = Tensor::View(storage.data(), {n, k}, DType::kBF16);
  const auto run = [&](const Tensor& w) {
    Tensor y = MakeEmpty({m, n});
    REQUIRE(ops::Linear(x.tensor, w, Tensor(), y).ok());
    return std::vector<float>(y.data<float>(), y.data<float>() + m * n);
  };
  {
    const Tensor w = owning();
    const size_t before = ops::cpu::PackedAmxWeightBytes();
    const std::vector<float> first = run(w);
    const size_t cached = ops::cpu::PackedAmxWeightBytes();
    CHECK(cached > before);
    CHECK(run(w) == first);  // from the cache
    CHECK(ops::cpu::PackedAmxWeightBytes() == cached);
    CHECK(run(view) == first);  // packed per call: the same layout, the same bits
  }
  // The weight's buffer is gone; new contents at the same address under a new owner, prepared
  // ahead of its first call as an engine does at load.
  for (float& v : w_values) v = -v;
  fill();
  const Tensor w2 = owning();
  ops::PrepareLinearWeight(w2);
  const size_t prepared = ops::cpu::PackedAmxWeightBytes();
  const std::vector<float> second = run(w2);
  CHECK(ops::cpu::PackedAmxWeightBytes() == prepared);  // the call packed nothing more
  CHECK(second == run(view));
  CHECK(second[0] != 0.f);
}

// Not a check: prints Linear's time for a short chunk (a follow-up question) at a Qwen2-0.5B MLP
// shape, with the weight packed per call (a view) and from the packed-weight cache.
TEST_CASE("Linear timing at few rows, packed per call and cached", "[.][bench]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t n = 4864, k = 896;
  auto w = MakeRandom({n, k}, DType::kBF16, rng, 0.05f);
  const Tensor view = Tensor::View(w.tensor.raw_data(), {n, k}, DType::kBF16);
  for (int64_t m : {17, 32, 128, 512}) {
    auto x = MakeRandom({m, k}, DType::kF32, rng);
    Tensor y = MakeEmpty({m, n});
    for (const bool cached : {false, true}) {
      double best = 1e30;
      for (int round = 0; round < 20; ++round) {
        const auto t0 = std::chrono::steady_clock::now();
        REQUIRE(ops::Linear(x.tensor, cached ? w.tensor : view, Tensor(), y).ok());
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::cout << fmt::format("Linear m={} n={} k={} bf16 {} ({}): {:.3f} ms\n", m, n, k,
                               cached ? "cached" : "packed per call", ops::cpu::Bf16GemmPath(),
                               best * 1e3);
    }
  }
}

TEST_CASE("Linear rejects mismatched shapes with a message naming them", "[unit][engine][ops]") {
  Tensor x = MakeEmpty({2, 8}), w = MakeEmpty({4, 7}), y = MakeEmpty({2, 4});
  const Status s = ops::Linear(x, w, Tensor(), y);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(MessageOf(s), Catch::Contains("[4, 7]"));
}

TEST_CASE("MatMul matches f64, plain and transposed", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const bool transpose = GENERATE(false, true);
  const int64_t m = 270, k = 65, n = 261;
  auto a = MakeRandom({m, k}, DType::kF32, rng);
  auto b = MakeRandom(transpose ? Shape{n, k} : Shape{k, n}, DType::kF32, rng);
  Tensor c = MakeEmpty({m, n});
  REQUIRE(ops::MatMul(a.tensor, b.tensor, transpose, c).ok());
  std::vector<double> want(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < k; ++kk)
        s += a.values[i * k + kk] * (transpose ? b.values[j * k + kk] : b.values[kk * n + j]);
      want[i * n + j] = s;
    }
  RequireClose(c, want, 1e-4, 1e-5);
}

TEST_CASE("MatMul batches over leading dims, shares a rank-2 b, takes 16-bit operands",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const bool transpose = GENERATE(false, true);
  const bool shared_b = GENERATE(false, true);
  const DType dtype = GENERATE(DType::kF32, DType::kBF16, DType::kF16);
  const int64_t batch0 = 2, batch1 = 3, m = 19, k = 40, n = 23;
  const int64_t entries = batch0 * batch1;
  auto a = MakeRandom({batch0, batch1, m, k}, dtype, rng);
  const Shape b_mat = transpose ? Shape{n, k} : Shape{k, n};
  const Shape b_shape = shared_b ? b_mat : Shape{batch0, batch1, b_mat[0], b_mat[1]};
  auto b = MakeRandom(b_shape, dtype, rng);
  Tensor c = MakeEmpty({batch0, batch1, m, n});
  INFO("transpose " << transpose << " shared b " << shared_b << " " << DTypeName(dtype));
  REQUIRE(ops::MatMul(a.tensor, b.tensor, transpose, c).ok());
  // The f64 reference on the operands' (rounded) values: 16-bit products are exact in f32, so
  // every dtype gets the f32 tolerance.
  std::vector<double> want(static_cast<size_t>(entries * m * n));
  for (int64_t e = 0; e < entries; ++e) {
    const double* ae = a.values.data() + e * m * k;
    const double* be = b.values.data() + (shared_b ? 0 : e * k * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          s += ae[i * k + kk] * (transpose ? be[j * k + kk] : be[kk * n + j]);
        }
        want[static_cast<size_t>((e * m + i) * n + j)] = s;
      }
    }
  }
  RequireClose(c, want, 1e-4, 1e-5);
}

TEST_CASE("MatMul over an empty inner dimension gives zeros", "[unit][engine][ops]") {
  Tensor a = MakeEmpty({2, 3, 0}), b = MakeEmpty({0, 4});
  Tensor c = MakeEmpty({2, 3, 4});
  std::fill_n(c.data<float>(), c.numel(), 7.0f);
  REQUIRE(ops::MatMul(a, b, false, c).ok());
  RequireClose(c, std::vector<double>(24, 0.0), 0);
}

TEST_CASE("MatMul names operands that do not chain or mix dtypes", "[unit][engine][ops]") {
  Tensor a = MakeEmpty({2, 3, 4}), c = MakeEmpty({2, 3, 5});
  Tensor b_wrong_batch = MakeEmpty({3, 4, 5});
  const Status batch = ops::MatMul(a, b_wrong_batch, false, c);
  CHECK(batch.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(MessageOf(batch), Catch::Contains("[3, 4, 5]"));
  Tensor b16 = *Tensor::Empty({4, 5}, DType::kBF16);
  CHECK(ops::MatMul(a, b16, false, c).code() == absl::StatusCode::kInvalidArgument);
  Tensor vec = MakeEmpty({4});
  CHECK(ops::MatMul(vec, b16, false, c).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("AddRmsNorm is the residual add then RmsNorm, output over the addend",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t rows = 9, d = 200;
  auto x = MakeRandom({rows, d}, DType::kF32, rng, 3.f);
  auto h = MakeRandom({rows, d}, DType::kF32, rng, 3.f);
  auto w = MakeRandom({d}, DType::kBF16, rng);
  // Unfused: r = x + h; y = RmsNorm(r).
  Tensor r = MakeEmpty({rows, d}), y = MakeEmpty({rows, d});
  REQUIRE(ops::Add(x.tensor, h.tensor, r).ok());
  REQUIRE(ops::RmsNorm(r, w.tensor, 1e-6f, y).ok());
  // Fused, writing y over h as the decoder does.
  Tensor residual = *x.tensor.To(Device::Cpu());
  Tensor out = *h.tensor.To(Device::Cpu());
  REQUIRE(ops::AddRmsNorm(residual, out, w.tensor, 1e-6f, out).ok());
  CHECK(std::memcmp(residual.raw_data(), r.raw_data(), r.nbytes()) == 0);
  CHECK(std::memcmp(out.raw_data(), y.raw_data(), y.nbytes()) == 0);
  // The sum must survive: y over the residual is refused.
  const Status alias = ops::AddRmsNorm(residual, h.tensor, w.tensor, 1e-6f, residual);
  CHECK(alias.code() == absl::StatusCode::kInvalidArgument);
  Tensor narrow = MakeEmpty({rows, d - 1});
  CHECK(ops::AddRmsNorm(residual, narrow, w.tensor, 1e-6f, out).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("RmsNorm and LayerNorm match f64 with 16-bit parameters", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const DType pdtype = GENERATE(DType::kF32, DType::kBF16);
  const int64_t rows = 37, d = 200;
  auto x = MakeRandom({rows, d}, DType::kF32, rng, 3.f);
  auto g = MakeRandom({d}, pdtype, rng);
  auto b = MakeRandom({d}, pdtype, rng);
  Tensor y = MakeEmpty({rows, d});
  std::vector<double> want(static_cast<size_t>(rows * d));

  REQUIRE(ops::RmsNorm(x.tensor, g.tensor, 1e-6f, y).ok());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < d; ++i) ms += x.values[r * d + i] * x.values[r * d + i];
    const double inv = 1 / std::sqrt(ms / d + 1e-6);
    for (int64_t i = 0; i < d; ++i) want[r * d + i] = x.values[r * d + i] * inv * g.values[i];
  }
  RequireClose(y, want, 1e-5, 1e-5);

  REQUIRE(ops::LayerNorm(x.tensor, g.tensor, b.tensor, 1e-5f, y).ok());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += x.values[r * d + i];
    mean /= d;
    for (int64_t i = 0; i < d; ++i) var += std::pow(x.values[r * d + i] - mean, 2);
    const double inv = 1 / std::sqrt(var / d + 1e-5);
    for (int64_t i = 0; i < d; ++i)
      want[r * d + i] = (x.values[r * d + i] - mean) * inv * g.values[i] + b.values[i];
  }
  RequireClose(y, want, 1e-5, 1e-5);
}

TEST_CASE("Gelu (erf, tanh), SiluMul, Add and Softmax match f64", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t n = 20000;  // above one parallel grain
  auto a = MakeRandom({n}, DType::kF32, rng, 4.f);
  auto b = MakeRandom({n}, DType::kF32, rng, 4.f);
  Tensor y = MakeEmpty({n});
  std::vector<double> want(n);

  REQUIRE(ops::Gelu(a.tensor, ops::GeluApproximation::kErf, y).ok());
  for (int64_t i = 0; i < n; ++i)
    want[i] = 0.5 * a.values[i] * (1 + std::erf(a.values[i] / std::sqrt(2.0)));
  RequireClose(y, want, 1e-6, 1e-6);

  REQUIRE(ops::Gelu(a.tensor, ops::GeluApproximation::kTanh, y).ok());
  for (int64_t i = 0; i < n; ++i) {
    const double v = a.values[i];
    want[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  RequireClose(y, want, 1e-6, 1e-6);

  REQUIRE(ops::SiluMul(a.tensor, b.tensor, y).ok());
  for (int64_t i = 0; i < n; ++i)
    want[i] = a.values[i] / (1 + std::exp(-a.values[i])) * b.values[i];
  RequireClose(y, want, 1e-6, 1e-6);

  REQUIRE(ops::Add(a.tensor, b.tensor, y).ok());
  for (int64_t i = 0; i < n; ++i) want[i] = a.values[i] + b.values[i];
  RequireClose(y, want, 1e-6);

  // Softmax over rows of 1000 with some -inf entries and one fully masked row.
  Tensor x2 = *a.tensor.Reshape({20, 1000});
  std::vector<double> xs = a.values;
  for (int64_t i = 0; i < n; i += 7) xs[i] = -std::numeric_limits<double>::infinity();
  for (int64_t i = 1000; i < 2000; ++i) xs[i] = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) x2.data<float>()[i] = static_cast<float>(xs[i]);
  Tensor y2 = MakeEmpty({20, 1000});
  REQUIRE(ops::Softmax(x2, y2).ok());
  for (int64_t r = 0; r < 20; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < 1000; ++i) mx = std::max(mx, xs[r * 1000 + i]);
    for (int64_t i = 0; i < 1000; ++i) sum += std::isinf(mx) ? 0 : std::exp(xs[r * 1000 + i] - mx);
    for (int64_t i = 0; i < 1000; ++i)
      want[r * 1000 + i] = sum == 0 ? 0 : std::exp(xs[r * 1000 + i] - mx) / sum;
  }
  RequireClose(y2, want, 1e-7, 1e-5);
}

TEST_CASE("CopyRowSlices gathers and scatters head ranges of chosen rows", "[unit][engine][ops]") {
  // src [6 rows, 10 floats]; copy columns [3, 7) of rows {4, 1, 5} into columns [2, 6) of rows
  // {0, 2, 1} of dst [3, 8]; everything else of dst keeps its value.
  std::vector<float> src(60), dst(24, -1.f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  const std::vector<int32_t> from = {4, 1, 5}, to = {0, 2, 1};
  REQUIRE(ops::CopyRowSlices(Device::Cpu(), 3, 4,
                             {.data = src.data(), .stride = 10, .col0 = 3, .rows = from},
                             {.data = dst.data(), .stride = 8, .col0 = 2, .rows = to})
              .ok());
  std::vector<float> want(24, -1.f);
  for (int i = 0; i < 3; ++i) {
    for (int c = 0; c < 4; ++c) want[to[i] * 8 + 2 + c] = src[from[i] * 10 + 3 + c];
  }
  CHECK(dst == want);

  // No index lists: rows 0, 1, ... on both sides (the past keys' prefix copy).
  std::vector<float> prefix(8, 0.f);
  REQUIRE(ops::CopyRowSlices(Device::Cpu(), 2, 4, {.data = src.data(), .stride = 10, .col0 = 6},
                             {.data = prefix.data(), .stride = 4})
              .ok());
  CHECK(prefix == std::vector<float>{6, 7, 8, 9, 16, 17, 18, 19});

  // Bad arguments are named, and nothing is written.
  const std::vector<int32_t> short_list = {1}, negative = {0, -2, 1};
  CHECK(ops::CopyRowSlices(Device::Cpu(), 3, 4,
                           {.data = src.data(), .stride = 10, .rows = short_list},
                           {.data = dst.data(), .stride = 8})
            .code() == absl::StatusCode::kInvalidArgument);
  CHECK(ops::CopyRowSlices(Device::Cpu(), 3, 4, {.data = src.data(), .stride = 10},
                           {.data = dst.data(), .stride = 8, .rows = negative})
            .code() == absl::StatusCode::kInvalidArgument);
  const auto overrun =
      ops::CopyRowSlices(Device::Cpu(), 1, 4, {.data = src.data(), .stride = 10, .col0 = 7},
                         {.data = dst.data(), .stride = 8});
  CHECK(overrun.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(overrun.message()), Catch::Contains("source columns [7, 11)"));
  CHECK(dst == want);
}

TEST_CASE("Embedding gathers rows and names an out-of-range id", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  auto table = MakeRandom({50, 24}, DType::kBF16, rng);
  const std::vector<int32_t> ids = {3, 0, 49, 3};
  Tensor out = MakeEmpty({4, 24});
  REQUIRE(ops::Embedding(table.tensor, test::MakeI32(ids), out).ok());
  std::vector<double> want;
  for (int32_t id : ids)
    for (int i = 0; i < 24; ++i) want.push_back(table.values[id * 24 + i]);
  RequireClose(out, want, 0);
  const Status s = ops::Embedding(table.tensor, test::MakeI32({1, 50, 2, 0}), out);
  CHECK(s.code() == absl::StatusCode::kOutOfRange);
  CHECK_THAT(MessageOf(s), Catch::Contains("50"));
}

TEST_CASE("RoPE rotates half-split pairs by position, as HF rotate_half", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t t = 9, h = 3, d = 64;
  const ops::RopeParams p{.head_dim = 64, .theta = 1e6};
  auto x = MakeRandom({t, h, d}, DType::kF32, rng);
  std::vector<int32_t> pos(t);
  std::uniform_int_distribution<int32_t> dist(0, 2000);
  for (auto& v : pos) v = dist(rng);
  REQUIRE(ops::ApplyRope(x.tensor, test::MakeI32(pos), p).ok());
  std::vector<double> want(x.values.size());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < h; ++j)
      for (int64_t e = 0; e < d / 2; ++e) {
        const double inv = 1 / std::pow(1e6, 2.0 * e / d), ang = pos[i] * inv;
        const double a = x.values[(i * h + j) * d + e], b = x.values[(i * h + j) * d + e + d / 2];
        want[(i * h + j) * d + e] = a * std::cos(ang) - b * std::sin(ang);
        want[(i * h + j) * d + e + d / 2] = b * std::cos(ang) + a * std::sin(ang);
      }
  // f32 angles (as HF) at positions up to 2000 are off by up to ~1e-4 rad.
  RequireClose(x.tensor, want, 2e-3);
}

TEST_CASE("RoPE's shared angle table holds ApplyRope's f32 angles exactly, grows, and has a cap",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const ops::RopeParams p{.head_dim = 48, .theta = 5e5};
  const std::vector<float> inv = ops::RopeInverseFrequencies(p);
  auto small = ops::RopeTable::For(p, 100);
  REQUIRE(small != nullptr);
  CHECK(small->positions() >= 100);
  auto big = ops::RopeTable::For(p, small->positions() + 1);  // grows
  REQUIRE(big != nullptr);
  CHECK(big->positions() > small->positions());
  CHECK(ops::RopeTable::For(p, 50) == big);  // the largest is shared
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(big->positions() - 1));
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t pos = dist(rng);
    for (size_t i = 0; i < inv.size(); ++i) {
      const float f = static_cast<float>(pos) * inv[i];
      REQUIRE(big->cos(pos)[i] == static_cast<float>(std::cos(static_cast<double>(f))));
      REQUIRE(big->sin(pos)[i] == static_cast<float>(std::sin(static_cast<double>(f))));
    }
  }
  // Past the cap the caller computes its own angles: the same rotation either way.
  CHECK(ops::RopeTable::For(p, int64_t{1} << 40) == nullptr);
  // RoPE parameters from a damaged checkpoint or segment neither fail nor pile up tables.
  CHECK(ops::RopeTable::For({.head_dim = 48, .theta = std::nan("")}, 10) == nullptr);
  for (size_t i = 0; i <= ops::RopeTable::kMaxRopes; ++i) {
    (void)ops::RopeTable::For({.head_dim = 48, .theta = 1e3 + static_cast<double>(i)}, 10);
  }
  CHECK(ops::RopeTable::For({.head_dim = 48, .theta = 7.5e3}, 10) == nullptr);
  const int64_t t = 3, h = 2, d = 48;
  auto x = MakeRandom({t, h, d}, DType::kF32, rng);
  const std::vector<int32_t> far = {5 + (1 << 26), 77 + (1 << 26), 1000 + (1 << 26)};
  REQUIRE(ops::ApplyRope(x.tensor, test::MakeI32(far), p).ok());  // beyond any table
  std::vector<double> want(x.values.size());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < h; ++j)
      for (int64_t e = 0; e < d / 2; ++e) {
        const double ang = static_cast<float>(far[i]) * inv[e];
        const double a = x.values[(i * h + j) * d + e], b = x.values[(i * h + j) * d + e + d / 2];
        want[(i * h + j) * d + e] = a * std::cos(ang) - b * std::sin(ang);
        want[(i * h + j) * d + e + d / 2] = b * std::cos(ang) + a * std::sin(ang);
      }
  RequireClose(x.tensor, want, 1e-5);
}

TEST_CASE("RoPE with host-checked positions rotates the same and checks the host copy",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const ops::RopeParams p{.head_dim = 32, .theta = 1e4};
  auto x = MakeRandom({5, 2, 32}, DType::kF32, rng);
  Tensor plain = *x.tensor.To(Device::Cpu());
  const std::vector<int32_t> pos = {0, 3, 17, 400, 9};
  const Tensor positions = test::MakeI32(pos);
  REQUIRE(ops::ApplyRope(plain, positions, p).ok());
  REQUIRE(ops::ApplyRope(x.tensor, positions, p, pos).ok());
  RequireClose(x.tensor, std::vector<double>(plain.data<float>(), plain.data<float>() + 320), 0);

  const std::vector<int32_t> short_copy = {0, 3};
  auto st = ops::ApplyRope(x.tensor, positions, p, short_copy);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("2 host positions for 5 tokens"));
  const std::vector<int32_t> negative = {0, 3, -1, 400, 9};
  st = ops::ApplyRope(x.tensor, positions, p, negative);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("position -1 of token 2"));
}

// Naive f64 attention: q [B,Tq,H,d], k/v [B,Tk,G,d].
std::vector<double> NaiveAttention(const test::RandomTensor& q, const test::RandomTensor& k,
                                   const test::RandomTensor& v, int64_t B, int64_t tq, int64_t tk,
                                   int64_t H, int64_t G, int64_t d, bool causal, int64_t offset) {
  std::vector<double> out(static_cast<size_t>(B * tq * H * d), 0.0);
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      for (int64_t i = 0; i < tq; ++i) {
        std::vector<double> s(tk, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < tk; ++j) {
          if (causal && j > i + offset) continue;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot +=
                q.values[((b * tq + i) * H + h) * d + e] * k.values[((b * tk + j) * G + g) * d + e];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < tk; ++j) sum += std::isinf(s[j]) ? 0 : std::exp(s[j] - mx);
        for (int64_t j = 0; j < tk; ++j) {
          if (std::isinf(s[j])) continue;
          const double p = std::exp(s[j] - mx) / sum;
          for (int64_t e = 0; e < d; ++e)
            out[((b * tq + i) * H + h) * d + e] += p * v.values[((b * tk + j) * G + g) * d + e];
        }
      }
    }
  return out;
}

TEST_CASE("Blocked attention matches naive f64 attention (causal, GQA, offsets, bidirectional)",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  struct Case {
    int64_t B, tq, tk, H, G, d;
    bool causal;
  };
  const Case c = GENERATE(Case{1, 150, 150, 4, 2, 32, true},   // several blocks, GQA
                          Case{1, 70, 300, 6, 2, 64, true},    // chunk after 230 earlier keys
                          Case{2, 1, 17, 2, 1, 16, true},      // one query
                          Case{2, 200, 200, 3, 3, 72, false},  // ViT-like, MHA
                          Case{1, 5, 260, 4, 4, 8, false});
  CAPTURE(c.B, c.tq, c.tk, c.H, c.G, c.d, c.causal);
  auto q = MakeRandom({c.B, c.tq, c.H, c.d}, DType::kF32, rng);
  auto k = MakeRandom({c.B, c.tk, c.G, c.d}, DType::kF32, rng);
  auto v = MakeRandom({c.B, c.tk, c.G, c.d}, DType::kF32, rng);
  Tensor out = MakeEmpty({c.B, c.tq, c.H, c.d});
  if (c.causal) {
    REQUIRE(ops::CausalAttention(q.tensor, k.tensor, v.tensor, out).ok());
  } else {
    REQUIRE(ops::BidirectionalAttention(q.tensor, k.tensor, v.tensor, out).ok());
  }
  RequireClose(out, NaiveAttention(q, k, v, c.B, c.tq, c.tk, c.H, c.G, c.d, c.causal, c.tk - c.tq),
               2e-5, 1e-4);
}

TEST_CASE("Attention rejects head counts that do not group", "[unit][engine][ops]") {
  Tensor q = MakeEmpty({1, 4, 6, 8}), k = MakeEmpty({1, 4, 4, 8}), out = MakeEmpty({1, 4, 6, 8});
  CHECK(ops::BidirectionalAttention(q, k, k, out).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine
