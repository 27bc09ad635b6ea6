// AttentionPack's numeric core (engine/ops/low_rank.h) on the CPU against the float64 references
// of low_rank_reference.h: the randomized SVD against Eckart–Young on matrices of known spectrum,
// and decode attention over the factors (in each stored format) against "rebuild each row at its
// rank, then attend" in double. The same references on every device: low_rank_device_test.cc.
#include "engine/ops/low_rank.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/kv/low_rank_factor.h"
#include "fmt/format.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/low_rank_reference.h"

namespace framezip::engine::ops {
namespace {

using namespace reference;  // low_rank_reference.h

TEST_CASE("RandomizedSvd meets Eckart-Young and finds the leading singular values",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t m = GENERATE(1, 7, 300, 2049);
  const int64_t n = GENERATE(64, 128);
  const int64_t k = std::min(m, n);
  const int rank = static_cast<int>(std::max<int64_t>(1, k / 4));
  CAPTURE(m, n, k, rank);
  const std::vector<double> sigma = GappedSpectrum(k, rank);
  const std::vector<double> a = MatrixWithSpectrum(m, n, sigma, rng);
  const std::vector<float> af = ToFloat(a);
  double total = 0;
  for (double s : sigma) total += s * s;

  if (rank < k) {
    auto f = RandomizedSvd(af, m, n, {.rank = rank, .seed = rng()});
    INFO((f.ok() ? "" : MessageOf(f.status())));
    REQUIRE(f.ok());
    REQUIRE(f->us.size() == static_cast<size_t>(m * rank));
    REQUIRE(f->vt.size() == static_cast<size_t>(rank * n));
    double tail = 0;
    for (int64_t i = rank; i < k; ++i) tail += sigma[i] * sigma[i];
    const double err = ReconstructionError2(a, *f);
    CAPTURE(err, tail, total);
    CHECK(std::fabs(err - tail) <= 0.01 * tail + 1e-9 * total);
    for (int i = 0; i < rank; ++i) {
      CAPTURE(i, f->singular_values[i], sigma[i]);
      CHECK(std::fabs(f->singular_values[i] - sigma[i]) <= 1e-3 * sigma[i]);
    }
    CHECK(OrthonormalityError(*f) <= 1e-4);
  }

  // Full rank: the factorisation is exact up to f32 rounding.
  auto full = RandomizedSvd(af, m, n, {.rank = static_cast<int>(k), .seed = rng()});
  REQUIRE(full.ok());
  const double err = ReconstructionError2(a, *full);
  CAPTURE(err, total);
  CHECK(std::sqrt(err) <= 1e-4 * std::sqrt(total));
  CHECK(std::is_sorted(full->singular_values.rbegin(), full->singular_values.rend()));
  CHECK(OrthonormalityError(*full) <= 1e-4);
}

TEST_CASE("RandomizedSvd is deterministic per seed and handles a zero matrix",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const auto a = testing::RandomNormal(300 * 64, rng);
  const uint64_t seed = rng();
  auto f1 = RandomizedSvd(a, 300, 64, {.rank = 16, .seed = seed});
  auto f2 = RandomizedSvd(a, 300, 64, {.rank = 16, .seed = seed});
  REQUIRE(f1.ok());
  REQUIRE(f2.ok());
  CHECK(f1->us == f2->us);
  CHECK(f1->vt == f2->vt);

  const std::vector<float> zero(300 * 64, 0.f);
  auto z = RandomizedSvd(zero, 300, 64, {.rank = 8, .seed = seed});
  REQUIRE(z.ok());
  CHECK(std::all_of(z->us.begin(), z->us.end(), [](float v) { return v == 0.f; }));
  CHECK(std::all_of(z->singular_values.begin(), z->singular_values.end(),
                    [](float v) { return v == 0.f; }));
}

TEST_CASE("RandomizedSvd refuses bad arguments", "[unit][engine][ops]") {
  std::vector<float> a(7 * 64, 1.f);
  const auto refused = [&](int64_t rows, int64_t cols, const RandomizedSvdOptions& o,
                           const std::string& what) {
    auto f = RandomizedSvd(a, rows, cols, o);
    REQUIRE_FALSE(f.ok());
    CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(f.status()), Catch::Contains(what));
  };
  refused(7, 64, {.rank = 0}, "rank 0");
  refused(7, 64, {.rank = 8}, "rank 8 is outside [1, min(rows, cols) = 7]");
  refused(7, 63, {.rank = 4}, "a has 448 elements, want rows·cols = 441");
  refused(0, 64, {.rank = 1}, "rows is 0");
  refused(7, 0, {.rank = 1}, "cols is 0");
  refused(7, 64, {.rank = 4, .power_iterations = -1}, "power_iterations is -1");
  a[3 * 64 + 5] = std::numeric_limits<float>::quiet_NaN();
  refused(7, 64, {.rank = 4}, "a[3, 5] is not finite");
}
TEST_CASE("LowRankBlockAttend equals attention over keys and values rebuilt at their ranks",
          "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int heads = 4, kv_heads = 2, rank_k = 8, rank_v = 20;
  // 32 and 64 take the fused key tile of the widest ISA, 48 AVX2's even on an AVX-512 machine
  // (each half of a head must hold whole vectors), 40 the portable path.
  const int d = GENERATE(32, 40, 48, 64);
  // One token; one partial chunk; three chunks, the last partial.
  const int64_t tokens = GENERATE(1, 300, 700);
  const bool llama3 = GENERATE(false, true);
  const float scale = GENERATE(0.f, 0.3f);
  const int format = GENERATE(0, 1, 2);  // f32, f16, int4 factors
  const int64_t hd = int64_t{kv_heads} * d;
  CAPTURE(d, tokens, llama3, scale, format);
  const RopeParams rope = MakeRope(d, llama3);

  const StoredBlock block = RandomStoredBlock(tokens, rank_k, rank_v, hd, format, rng);
  // Queries small enough that the softmax spreads over many tokens.
  const std::vector<float> q = testing::RandomNormal(static_cast<size_t>(heads * d), rng, 0.05f);
  const std::vector<int32_t> positions = RunsOfPositions(tokens, rng);

  const LowRankBlockView view = block.View(positions);
  std::vector<float> weights(static_cast<size_t>(heads * tokens), -1.f);
  BlockAttention got;
  REQUIRE(LowRankBlockAttend(q, view, {.num_heads = heads, .num_kv_heads = kv_heads, .head_dim = d},
                             rope, scale, weights, got)
              .ok());

  const double want_scale = scale == 0 ? 1.0 / std::sqrt(static_cast<double>(d)) : scale;
  const Reference want =
      AttendInDouble(q, block.us_k.values, block.vt_k.values, rank_k, block.Values(), rank_v,
                     positions, heads, kv_heads, d, rope, want_scale);
  // A score off by e moves its weight by a factor e^(±2e) (itself and the maximum).
  const double w_rel = 2.5 * want.score_tol;
  for (int64_t h = 0; h < heads; ++h) {
    CAPTURE(h, got.max[h], want.max[h], got.sum[h], want.sum[h]);
    REQUIRE(std::fabs(got.max[h] - want.max[h]) <= want.score_tol);
    REQUIRE(std::fabs(got.sum[h] - want.sum[h]) <= w_rel * want.sum[h] + 1e-6);
    for (int64_t t = 0; t < tokens; ++t) {
      const double w = std::exp(want.s[h * tokens + t] - want.max[h]);
      CAPTURE(t, weights[h * tokens + t], w);
      REQUIRE(std::fabs(weights[h * tokens + t] - w) <= w_rel * w + 1e-6);
    }
    for (int64_t c = 0; c < d; ++c) {
      CAPTURE(c, got.out[h * d + c], want.out[h * d + c]);
      REQUIRE(std::fabs(got.out[h * d + c] - want.out[h * d + c]) <=
              (w_rel + 1e-5) * want.out_mass[h * d + c] + 1e-6);
    }
  }
}

TEST_CASE("LowRankBlockAttend at full rank equals attention over the original keys and values",
          "[unit][engine][ops]") {
  // Compressing keys before RoPE and rotating each rebuilt key is the engine's ApplyRope of the
  // key; values at full rank are the values.
  std::mt19937_64 rng(testing::TestSeed());
  const int heads = 4, kv_heads = 2;
  const int d = GENERATE(32, 64);
  const int64_t tokens = 300, hd = int64_t{kv_heads} * d, group = heads / kv_heads;
  const int rank = static_cast<int>(hd);
  CAPTURE(d);
  std::vector<float> keys = testing::RandomNormal(static_cast<size_t>(tokens * hd), rng);
  const std::vector<float> vals = testing::RandomNormal(static_cast<size_t>(tokens * hd), rng);
  auto fk = RandomizedSvd(keys, tokens, hd, {.rank = rank, .seed = rng()});
  auto fv = RandomizedSvd(vals, tokens, hd, {.rank = rank, .seed = rng()});
  REQUIRE(fk.ok());
  REQUIRE(fv.ok());
  const std::vector<float> q = testing::RandomNormal(static_cast<size_t>(heads * d), rng, 0.1f);
  std::vector<int32_t> positions(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) positions[t] = static_cast<int32_t>(35 + t);  // LLaVA
  const std::vector<uint16_t> ranks(static_cast<size_t>(tokens), static_cast<uint16_t>(rank));
  const RopeParams rope = MakeRope(d, false);
  const LowRankBlockView view{.key_us = FactorView::OfF32(fk->us.data(), tokens, rank),
                              .key_vt = FactorView::OfF32(fk->vt.data(), rank, hd),
                              .value_us = FactorView::OfF32(fv->us.data(), tokens, rank),
                              .value_vt = FactorView::OfF32(fv->vt.data(), rank, hd),
                              .positions = positions,
                              .value_ranks = ranks};
  std::vector<float> weights(static_cast<size_t>(heads * tokens));
  BlockAttention got;
  REQUIRE(LowRankBlockAttend(q, view, {.num_heads = heads, .num_kv_heads = kv_heads, .head_dim = d},
                             rope, 0.f, weights, got)
              .ok());

  Tensor kt = Tensor::View(keys.data(), {tokens, kv_heads, d}, DType::kF32);
  const Tensor pt = Tensor::View(positions.data(), {tokens}, DType::kI32);
  REQUIRE(ApplyRope(kt, pt, rope).ok());
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> s(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c)
        dot += double{q[h * d + c]} * keys[t * hd + h / group * d + c];
      s[t] = scale * dot;
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    std::vector<double> out(static_cast<size_t>(d), 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
      const double w = std::exp(s[t] - mx);
      sum += w;
      for (int64_t c = 0; c < d; ++c) out[c] += w * vals[t * hd + h / group * d + c];
    }
    for (int64_t c = 0; c < d; ++c) {
      CAPTURE(h, c, got.out[h * d + c] / got.sum[h], out[c] / sum);
      REQUIRE(std::fabs(got.out[h * d + c] / got.sum[h] - out[c] / sum) <= 1e-4);
    }
  }
}

TEST_CASE("LowRankBlockAttend refuses bad arguments", "[unit][engine][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  const LowRankAttentionShape shape{.num_heads = 4, .num_kv_heads = 2, .head_dim = 32};
  Factors f = MixedRankFactors(10, 16, 64, rng);
  const std::vector<float> us_k(10 * 8, 0.5f), vt_k(8 * 64, 0.5f), q(4 * 32, 1.f);
  std::vector<int32_t> positions(10, 3);
  std::vector<float> weights(4 * 10);
  LowRankBlockView view{.key_us = FactorView::OfF32(us_k.data(), 10, 8),
                        .key_vt = FactorView::OfF32(vt_k.data(), 8, 64),
                        .value_us = FactorView::OfF32(f.us.data(), 10, 16),
                        .value_vt = FactorView::OfF32(f.vt.data(), 16, 64),
                        .positions = positions,
                        .value_ranks = f.ranks};
  BlockAttention out;
  const auto refused = [&](const LowRankBlockView& v, const LowRankAttentionShape& s,
                           const RopeParams& rope, std::span<float> w, const std::string& what) {
    const Status st = LowRankBlockAttend(q, v, s, rope, 0.f, w, out);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(st), Catch::Contains(what));
  };
  const RopeParams rope = MakeRope(32, false);
  REQUIRE(LowRankBlockAttend(q, view, shape, rope, 0.f, weights, out).ok());
  LowRankAttentionShape s = shape;
  s.num_kv_heads = 3;
  refused(view, s, rope, weights, "num_heads 4 is not a positive multiple of num_kv_heads 3");
  refused(view, shape, MakeRope(64, false), weights, "head_dim 32 with rope.head_dim 64");
  refused(view, shape, rope, std::span(weights).first(39), "weights has 39 elements, want 40");
  LowRankBlockView bad = view;
  bad.key_vt.cols = 32;
  refused(bad, shape, rope, weights, "key_vt is 8x32, want 8x64");
  bad = view;
  bad.value_us.f32 = nullptr;
  refused(bad, shape, rope, weights, "value_us has no data");
  f.ranks[7] = 17;
  refused(view, shape, rope, weights, "value_ranks[7] is 17, outside [0, 16]");
  f.ranks[7] = 16;
  positions[4] = -2;
  refused(view, shape, rope, weights, "positions[4] is -2");
}

// Not a check: prints the factorisation time at the shapes of one video's visual block.
TEST_CASE("RandomizedSvd timing", "[.][bench]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int64_t m = 4096, n = 64;
  const auto a = testing::RandomNormal(static_cast<size_t>(m * n), rng);
  for (int rank : {16, 64}) {
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      auto f = RandomizedSvd(a, m, n, {.rank = rank, .seed = rng()});
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      REQUIRE(f.ok());
      best = std::min(best, s);
    }
    std::cout << fmt::format("RandomizedSvd m={} n={} R={} q=2: {:.2f} ms (best of 5)\n", m, n,
                             rank, best * 1e3);
  }
}

// Not a check: prints one decode step's attention over an 8k-token block of the shipped
// model's shape (4 heads of 32, 2 KV heads, ranks 8/16, f16 factors) on the compute pool.
TEST_CASE("LowRankBlockAttend timing", "[.][bench]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int heads = 4, kv_heads = 2, d = 32, rank_k = 8, rank_v = 16;
  const int64_t tokens = 8190, hd = int64_t{kv_heads} * d;
  const StoredBlock block = RandomStoredBlock(tokens, rank_k, rank_v, hd, /*f16*/ 1, rng);
  const std::vector<float> q = testing::RandomNormal(static_cast<size_t>(heads * d), rng, 0.05f);
  std::vector<int32_t> positions(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) positions[t] = static_cast<int32_t>(14 + t);
  const LowRankBlockView view = block.View(positions);
  std::vector<float> weights(static_cast<size_t>(heads * tokens));
  BlockAttention out;
  double best = 1e30;
  for (int round = 0; round < 200; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(LowRankBlockAttend(q, view,
                               {.num_heads = heads, .num_kv_heads = kv_heads, .head_dim = d},
                               MakeRope(d, false), 0.f, weights, out)
                .ok());
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::cout << fmt::format("LowRankBlockAttend T={} R_k={} R_v={} f16: {:.1f} us (best of 200)\n",
                           tokens, rank_k, rank_v, best * 1e6);
}

}  // namespace
}  // namespace framezip::engine::ops
