// AttentionPack's numeric core (engine/ops/low_rank.h) against float64 references: the
// randomized SVD against Eckart–Young on matrices of known spectrum, and decode attention over
// the factors (in each stored format) against "rebuild each row at its rank, then attend" in
// double.
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

namespace framezip::engine::ops {
namespace {

using Columns = std::vector<std::vector<double>>;  // a matrix as its columns

// k orthonormal columns of length m (m >= k): Gram–Schmidt QR of a Gaussian matrix, each
// column projected twice so the basis is orthonormal to double precision.
Columns RandomOrthonormal(int64_t m, int64_t k, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  Columns x(static_cast<size_t>(k), std::vector<double>(static_cast<size_t>(m)));
  for (size_t j = 0; j < x.size(); ++j) {
    for (double& v : x[j]) v = normal(rng);
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < j; ++i) {
        double dot = 0;
        for (int64_t r = 0; r < m; ++r) dot += x[i][r] * x[j][r];
        for (int64_t r = 0; r < m; ++r) x[j][r] -= dot * x[i][r];
      }
    }
    double norm = 0;
    for (double v : x[j]) norm += v * v;
    for (double& v : x[j]) v /= std::sqrt(norm);
  }
  return x;
}

// k = min(m, n) singular values decaying by 5% a step, with a 20× drop after the first `rank`.
// Without oversampling, randomized SVD resolves σ_1..σ_R to about (σ_{R+1}/σ_R)^(2q+1) (q = 2
// power iterations); the gap makes 1e-3 a fair bar for every seed, while the tail stays far
// above f32 rounding so the Eckart–Young comparison has teeth.
std::vector<double> GappedSpectrum(int64_t k, int64_t rank) {
  std::vector<double> sigma(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) sigma[i] = 3.0 * std::pow(0.95, i) * (i < rank ? 1.0 : 0.05);
  return sigma;
}

// A = X·diag(σ)·Yᵀ, m × n row-major, with orthonormal X [m, k] and Y [n, k].
std::vector<double> MatrixWithSpectrum(int64_t m, int64_t n, const std::vector<double>& sigma,
                                       std::mt19937_64& rng) {
  const int64_t k = static_cast<int64_t>(sigma.size());
  const Columns x = RandomOrthonormal(m, k, rng), y = RandomOrthonormal(n, k, rng);
  std::vector<double> a(static_cast<size_t>(m * n), 0.0);
  for (int64_t l = 0; l < k; ++l) {
    for (int64_t i = 0; i < m; ++i) {
      const double s = sigma[l] * x[l][i];
      for (int64_t j = 0; j < n; ++j) a[i * n + j] += s * y[l][j];
    }
  }
  return a;
}

std::vector<float> ToFloat(const std::vector<double>& x) { return {x.begin(), x.end()}; }

// ‖A − us·vt‖_F² in double.
double ReconstructionError2(const std::vector<double>& a, const LowRankFactors& f) {
  double err = 0;
  for (int64_t i = 0; i < f.rows; ++i) {
    for (int64_t j = 0; j < f.cols; ++j) {
      double v = 0;
      for (int l = 0; l < f.rank; ++l) v += double{f.us[i * f.rank + l]} * f.vt[l * f.cols + j];
      err += (a[i * f.cols + j] - v) * (a[i * f.cols + j] - v);
    }
  }
  return err;
}

// The rows of vt are orthonormal (vt·vtᵀ = I).
double OrthonormalityError(const LowRankFactors& f) {
  double worst = 0;
  for (int i = 0; i < f.rank; ++i) {
    for (int j = 0; j < f.rank; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < f.cols; ++c) {
        dot += double{f.vt[i * f.cols + c]} * f.vt[j * f.cols + c];
      }
      worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
    }
  }
  return worst;
}

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

// Random factors with AttentionPack's two groups (docs/methods.md §2.3): a random 25% of the
// tokens at rank R, the rest at R/4, and one token at rank 0 (it must contribute nothing).
struct Factors {
  std::vector<float> us, vt;
  std::vector<uint16_t> ranks;
};
Factors MixedRankFactors(int64_t tokens, int rank, int64_t hd, std::mt19937_64& rng) {
  Factors f;
  f.us = testing::RandomNormal(static_cast<size_t>(tokens * rank), rng);
  f.vt = testing::RandomNormal(static_cast<size_t>(rank * hd), rng);
  f.ranks.assign(static_cast<size_t>(tokens), rank / 4);
  std::fill(f.ranks.begin(), f.ranks.begin() + (tokens + 3) / 4, rank);
  std::shuffle(f.ranks.begin(), f.ranks.end(), rng);
  if (tokens > 2) f.ranks[static_cast<size_t>(tokens / 2)] = 0;
  return f;
}

// Row t rebuilt at its rank, all HD columns, in double.
std::vector<double> RebuiltRow(const Factors& f, int64_t t, int rank, int64_t hd) {
  std::vector<double> row(static_cast<size_t>(hd), 0.0);
  for (int j = 0; j < f.ranks[t]; ++j) {
    for (int64_t c = 0; c < hd; ++c) row[c] += double{f.us[t * rank + j]} * f.vt[j * hd + c];
  }
  return row;
}

// The engine's half-split RoPE (rope.h) in double: the angle is the f32 product
// float(pos)·inv_freq[i] as ApplyRope forms it, its cos/sin and the rotation in double.
void RotateHalfSplit(std::vector<double>& x, int32_t pos, const std::vector<float>& inv_freq) {
  const size_t half = x.size() / 2;
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<float>(pos) * inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle), a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

RopeParams MakeRope(int d, bool llama3) {
  RopeParams rope{.head_dim = d};
  if (llama3) {
    rope.theta = 500000;
    rope.llama3_factor = 8;
  }
  return rope;
}

// A factor [rows, cols] in a block's stored format, and the f32 values that format holds (what
// the references read).
struct StoredFactor {
  int64_t rows = 0, cols = 0;
  bool is_f32 = true;
  kv::LowRankFactor stored;   // format 1 (f16) or 2 (int4)
  std::vector<float> values;  // what the format holds, as f32 (a format-0 view reads these)

  FactorView View() const {
    return is_f32 ? FactorView::OfF32(values.data(), rows, cols) : stored.View();
  }
};

StoredFactor Store(const std::vector<float>& x, int64_t rows, int64_t cols, int format) {
  StoredFactor f;
  f.rows = rows;
  f.cols = cols;
  f.is_f32 = format == 0;
  if (f.is_f32) {
    f.values = x;
    return f;
  }
  f.stored = kv::LowRankFactor::Encode(
      x, rows, cols, format == 1 ? kv::FactorFormat::kF16 : kv::FactorFormat::kInt4);
  f.values = f.stored.Decode();
  return f;
}

// A block's four factors, random, stored in one format, with values at mixed ranks.
struct StoredBlock {
  StoredFactor us_k, vt_k, us_v, vt_v;
  std::vector<uint16_t> value_ranks;

  // The values as the format holds them, at their ranks (what references rebuild).
  Factors Values() const { return {us_v.values, vt_v.values, value_ranks}; }
  LowRankBlockView View(std::span<const int32_t> positions) const {
    return {.key_us = us_k.View(),
            .key_vt = vt_k.View(),
            .value_us = us_v.View(),
            .value_vt = vt_v.View(),
            .positions = positions,
            .value_ranks = value_ranks};
  }
};

StoredBlock RandomStoredBlock(int64_t tokens, int rank_k, int rank_v, int64_t hd, int format,
                              std::mt19937_64& rng) {
  StoredBlock b;
  b.us_k = Store(testing::RandomNormal(static_cast<size_t>(tokens * rank_k), rng), tokens, rank_k,
                 format);
  b.vt_k = Store(testing::RandomNormal(static_cast<size_t>(rank_k * hd), rng), rank_k, hd, format);
  const Factors mixed = MixedRankFactors(tokens, rank_v, hd, rng);
  b.us_v = Store(mixed.us, tokens, rank_v, format);
  b.vt_v = Store(mixed.vt, rank_v, hd, format);
  b.value_ranks = mixed.ranks;
  return b;
}

// Ascending positions in runs: mostly consecutive, with a jump every so often (a block of visual
// tokens that ZipVL or a text turn interrupted).
std::vector<int32_t> RunsOfPositions(int64_t tokens, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> jump(2, 900), start(0, 20000);
  std::bernoulli_distribution breaks(0.03);
  std::vector<int32_t> positions(static_cast<size_t>(tokens));
  int32_t p = start(rng);
  for (int32_t& pos : positions) {
    pos = p;
    p += breaks(rng) ? jump(rng) : 1;
  }
  return positions;
}

// The reference of LowRankBlockAttend in double: scores of rotated rebuilt keys, the block's own
// maxima, sums and unnormalised value sums.
struct Reference {
  std::vector<double> s, max, sum, out, out_mass;  // out_mass[h·d + c] = Σ_t w·|ṽ_t[c]|
  double score_tol = 0;                            // the largest per-score tolerance
};

Reference AttendInDouble(const std::vector<float>& q, const std::vector<float>& us_k,
                         const std::vector<float>& vt_k, int rank_k, const Factors& values,
                         int rank_v, const std::vector<int32_t>& positions, int heads, int kv_heads,
                         int d, const RopeParams& rope, double scale) {
  const int64_t tokens = static_cast<int64_t>(positions.size()), hd = int64_t{kv_heads} * d;
  const int64_t group = heads / kv_heads;
  const std::vector<float> inv_freq = RopeInverseFrequencies(rope);
  Factors keys{us_k, vt_k, std::vector<uint16_t>(static_cast<size_t>(tokens), rank_k)};
  Reference r;
  r.s.resize(static_cast<size_t>(heads * tokens));
  r.max.assign(static_cast<size_t>(heads), -1e300);
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<double> row = RebuiltRow(keys, t, rank_k, hd);
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> k(row.begin() + h / group * d, row.begin() + (h / group + 1) * d);
      RotateHalfSplit(k, positions[t], inv_freq);
      double dot = 0, qq = 0, kk = 0;
      for (int64_t c = 0; c < d; ++c) {
        dot += q[h * d + c] * k[c];
        qq += double{q[h * d + c]} * q[h * d + c];
        kk += k[c] * k[c];
      }
      // The reference rounds each angle to f32 as HF does (position · inv_freq in f32); the kernel
      // carries a run's angles from tile to tile by rotation, which lands within half an f32 ulp
      // of that rounded angle, not on it. Turning channel pair c by δ_c moves the score by at
      // most δ_c·|q_c|·|k_c| (the pair's norms): allowed on top of the f32 arithmetic's 1e-4.
      double turn = 0;
      const int64_t half = d / 2;
      for (int64_t c = 0; c < half; ++c) {
        const double angle = static_cast<double>(positions[t]) * inv_freq[c];
        const double qn = std::hypot(double{q[h * d + c]}, double{q[h * d + c + half]});
        const double kn = std::hypot(k[c], k[c + half]);
        turn += std::ldexp(angle, -24) * qn * kn;
      }
      r.s[h * tokens + t] = scale * dot;
      r.max[h] = std::max(r.max[h], scale * dot);
      // Relative to the dot product's own scale, so scores near zero are held to it too.
      r.score_tol = std::max(r.score_tol, scale * (1e-4 * std::sqrt(qq * kk) + turn));
    }
  }
  r.sum.assign(static_cast<size_t>(heads), 0.0);
  r.out.assign(static_cast<size_t>(heads * d), 0.0);
  r.out_mass.assign(static_cast<size_t>(heads * d), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<double> v = RebuiltRow(values, t, rank_v, hd);
    for (int64_t h = 0; h < heads; ++h) {
      const double w = std::exp(r.s[h * tokens + t] - r.max[h]);
      r.sum[h] += w;
      for (int64_t c = 0; c < d; ++c) {
        r.out[h * d + c] += w * v[h / group * d + c];
        r.out_mass[h * d + c] += w * std::fabs(v[h / group * d + c]);
      }
    }
  }
  return r;
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
