// AttentionPack on the CPU (contracts in low_rank.h). RandomizedSvd keeps every matrix LAPACK
// touches column-major, so the row-major input is read as its transpose and no copy is made;
// the two attention functions stream the factors with the shared vector loops of cpu_kernels.h
// (the fused key-score tile among them, AVX2 or AVX-512).
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <random>
#include <string_view>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/low_rank.h"

namespace framezip::engine::ops {
namespace {

// LAPACK from libopenblas through its Fortran symbols (no LAPACKE header is installed). LP64
// integers; character arguments carry a hidden trailing length (gfortran ABI).
extern "C" {
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work,
             const int* lwork, int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau,
             float* work, const int* lwork, int* info);
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s,
             float* u, const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork,
             int* iwork, int* info, size_t jobz_len);
}

// Token rows of keys rebuilt at a time: 32 · HD floats stay in L1/L2 for HD up to 1024.
constexpr int64_t kKeyTile = 32;

Status LapackError(std::string_view routine, int info) {
  return InternalError("RandomizedSvd: LAPACK {} failed with info {}", routine, info);
}

// A workspace query answers in a float; round up so the size is never short.
int WorkSize(float query) { return std::max(1, static_cast<int>(std::ceil(query))); }

// Overwrites the column-major rows × cols matrix x (rows >= cols) with an orthonormal basis of
// its columns. Householder QR: Q is orthonormal even when x is rank-deficient (or zero).
Status Orthonormalize(float* x, int rows, int cols) {
  std::vector<float> tau(static_cast<size_t>(cols));
  int info = 0, lwork = -1;
  float query = 0;
  sgeqrf_(&rows, &cols, x, &rows, tau.data(), &query, &lwork, &info);
  if (info != 0) return LapackError("sgeqrf", info);
  lwork = WorkSize(query);
  std::vector<float> work(static_cast<size_t>(lwork));
  sgeqrf_(&rows, &cols, x, &rows, tau.data(), work.data(), &lwork, &info);
  if (info != 0) return LapackError("sgeqrf", info);
  lwork = -1;
  sorgqr_(&rows, &cols, &cols, x, &rows, tau.data(), &query, &lwork, &info);
  if (info != 0) return LapackError("sorgqr", info);
  lwork = WorkSize(query);
  work.resize(static_cast<size_t>(lwork));
  sorgqr_(&rows, &cols, &cols, x, &rows, tau.data(), work.data(), &lwork, &info);
  if (info != 0) return LapackError("sorgqr", info);
  return absl::OkStatus();
}

// y [m, r] = A · x [n, r], both column-major; A is row-major m × n, i.e. column-major Aᵀ.
void MulA(const float* a, int m, int n, const float* x, int r, float* y) {
  cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, m, r, n, 1.f, a, n, x, n, 0.f, y, m);
}

// x [n, r] = Aᵀ · y [m, r], both column-major.
void MulAt(const float* a, int m, int n, const float* y, int r, float* x) {
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, r, m, 1.f, a, n, y, m, 0.f, x, n);
}

Status CheckSvdArguments(std::span<const float> a, int64_t rows, int64_t cols,
                         const RandomizedSvdOptions& options) {
  if (rows < 1 || rows > INT_MAX) return InvalidArgumentError("RandomizedSvd: rows is {}", rows);
  if (cols < 1 || cols > INT_MAX) return InvalidArgumentError("RandomizedSvd: cols is {}", cols);
  if (static_cast<int64_t>(a.size()) != rows * cols) {
    return InvalidArgumentError("RandomizedSvd: a has {} elements, want rows·cols = {}", a.size(),
                                rows * cols);
  }
  if (options.rank < 1 || options.rank > std::min(rows, cols)) {
    return InvalidArgumentError("RandomizedSvd: rank {} is outside [1, min(rows, cols) = {}]",
                                options.rank, std::min(rows, cols));
  }
  if (options.power_iterations < 0) {
    return InvalidArgumentError("RandomizedSvd: power_iterations is {}", options.power_iterations);
  }
  // NaN or Inf would make sgesdd fail or return garbage; name the entry instead.
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) {
      return InvalidArgumentError("RandomizedSvd: a[{}, {}] is not finite", i / cols, i % cols);
    }
  }
  return absl::OkStatus();
}

// A range basis Q [m, r] (column-major) of A, by subspace iteration from a seeded Gaussian.
StatusOr<std::vector<float>> RangeBasis(const float* a, int m, int n,
                                        const RandomizedSvdOptions& options) {
  const int r = options.rank;
  std::vector<float> omega(static_cast<size_t>(n) * r), q(static_cast<size_t>(m) * r);
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : omega) x = normal(rng);
  MulA(a, m, n, omega.data(), r, q.data());
  FZ_RETURN_IF_ERROR(Orthonormalize(q.data(), m, r));
  // Re-orthonormalising after each product keeps the small singular directions from drowning
  // in f32 rounding (Halko et al. Alg. 4.4).
  std::vector<float>& z = omega;
  for (int it = 0; it < options.power_iterations; ++it) {
    MulAt(a, m, n, q.data(), r, z.data());
    FZ_RETURN_IF_ERROR(Orthonormalize(z.data(), n, r));
    MulA(a, m, n, z.data(), r, q.data());
    FZ_RETURN_IF_ERROR(Orthonormalize(q.data(), m, r));
  }
  return q;
}

// SVD of the small B = Qᵀ·A (R × n), given as bt = Bᵀ (column-major n × R, destroyed):
// Bᵀ = W·Σ·Ûᵀ. LAPACK's U (column-major n × R) is W, i.e. row-major Wᵀ = vt; its VT (column-major
// R × R, Ûᵀ) read row-major is Û.
Status SmallSvd(float* bt, int n, int r, LowRankFactors& f, std::vector<float>& u_hat) {
  const char jobz = 'S';
  std::vector<int> iwork(8 * static_cast<size_t>(r));
  int info = 0, lwork = -1;
  float query = 0;
  sgesdd_(&jobz, &n, &r, bt, &n, f.singular_values.data(), f.vt.data(), &n, u_hat.data(), &r,
          &query, &lwork, iwork.data(), &info, 1);
  if (info != 0) return LapackError("sgesdd", info);
  lwork = WorkSize(query);
  std::vector<float> work(static_cast<size_t>(lwork));
  sgesdd_(&jobz, &n, &r, bt, &n, f.singular_values.data(), f.vt.data(), &n, u_hat.data(), &r,
          work.data(), &lwork, iwork.data(), &info, 1);
  if (info != 0) return LapackError("sgesdd", info);
  return absl::OkStatus();
}

Status CheckSize(std::string_view op, std::string_view name, size_t size, int64_t want) {
  if (static_cast<int64_t>(size) != want) {
    return InvalidArgumentError("{}: {} has {} elements, want {}", op, name, size, want);
  }
  return absl::OkStatus();
}

// The checks both attention functions share: head counts, factor sizes and per-token ranks.
Status CheckFactors(std::string_view op, const LowRankAttentionShape& s, std::span<const float> us,
                    std::span<const float> vt, std::span<const uint16_t> ranks) {
  if (s.num_kv_heads < 1 || s.num_heads < 1 || s.num_heads % s.num_kv_heads != 0) {
    return InvalidArgumentError("{}: num_heads {} is not a positive multiple of num_kv_heads {}",
                                op, s.num_heads, s.num_kv_heads);
  }
  if (s.head_dim < 1) return InvalidArgumentError("{}: head_dim is {}", op, s.head_dim);
  if (s.rank < 1) return InvalidArgumentError("{}: rank is {}", op, s.rank);
  const int64_t tokens = static_cast<int64_t>(ranks.size());
  const int64_t hd = int64_t{s.num_kv_heads} * s.head_dim;
  FZ_RETURN_IF_ERROR(CheckSize(op, "us", us.size(), tokens * s.rank));
  FZ_RETURN_IF_ERROR(CheckSize(op, "vt", vt.size(), s.rank * hd));
  for (size_t t = 0; t < ranks.size(); ++t) {
    if (ranks[t] > s.rank) {
      return InvalidArgumentError("{}: ranks[{}] is {}, outside [0, {}]", op, t, ranks[t], s.rank);
    }
  }
  return absl::OkStatus();
}

// keys[i, :] = us[t0 + i, :r] · vt[:r, :] for the n tokens of a tile (all G heads).
void RebuildKeys(const float* us, const float* vt, const uint16_t* ranks, int64_t t0, int64_t n,
                 int64_t rank, int64_t hd, float* keys) {
  std::fill(keys, keys + n * hd, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    const float* u = us + (t0 + i) * rank;
    for (int32_t j = 0; j < ranks[t0 + i]; ++j) cpu::Axpy(u[j], vt + j * hd, hd, keys + i * hd);
  }
}

// The angles of the n tokens of a tile into cos/sin [n, d/2]. A tile's first token (and any token
// not one position after its predecessor) gets the f32 angles of ApplyRopeCpu; the next ones turn
// the previous row by one position's step (angle addition), which replaces d transcendental calls
// per token — the cost that dominated decode over a block — by 4 products per frequency, at an
// error that grows to ~32 f32 ulps over a 32-token tile.
void TileAngles(const std::vector<float>& inv_freq, const std::vector<float>& step_cos,
                const std::vector<float>& step_sin, const int32_t* positions, int64_t t0, int64_t n,
                float* cos, float* sin) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = t0 + i;
    float* co = cos + i * half;
    float* si = sin + i * half;
    if (i > 0 && positions[t] == positions[t - 1] + 1) {
      const float* pc = co - half;
      const float* ps = si - half;
      for (int64_t c = 0; c < half; ++c) {
        co[c] = pc[c] * step_cos[c] - ps[c] * step_sin[c];
        si[c] = ps[c] * step_cos[c] + pc[c] * step_sin[c];
      }
      continue;
    }
    for (int64_t c = 0; c < half; ++c) {
      const float f = static_cast<float>(positions[t]) * inv_freq[c];
      co[c] = static_cast<float>(std::cos(static_cast<double>(f)));
      si[c] = static_cast<float>(std::sin(static_cast<double>(f)));
    }
  }
}

// Half-split RoPE of each tile row's G heads with its token's angles (TileAngles).
void RotateKeys(const float* cos, const float* sin, int64_t n, int64_t kv_heads, int64_t d,
                float* keys) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < n; ++i) {
    const float* co = cos + i * half;
    const float* si = sin + i * half;
    for (int64_t g = 0; g < kv_heads; ++g) {
      float* v = keys + (i * kv_heads + g) * d;
      for (int64_t c = 0; c < half; ++c) {
        const float x = v[c], y = v[c + half];
        v[c] = x * co[c] - y * si[c];
        v[c + half] = y * co[c] + x * si[c];
      }
    }
  }
}

}  // namespace

StatusOr<LowRankFactors> RandomizedSvd(std::span<const float> a, int64_t rows, int64_t cols,
                                       const RandomizedSvdOptions& options) {
  FZ_RETURN_IF_ERROR(CheckSvdArguments(a, rows, cols, options));
  cpu::EnsureBlasSingleThreaded();
  const int m = static_cast<int>(rows), n = static_cast<int>(cols), r = options.rank;
  FZ_ASSIGN_OR_RETURN(std::vector<float> q, RangeBasis(a.data(), m, n, options));

  LowRankFactors f;
  f.rows = rows;
  f.cols = cols;
  f.rank = r;
  f.vt.resize(static_cast<size_t>(n) * r);
  f.singular_values.resize(static_cast<size_t>(r));
  std::vector<float> bt(static_cast<size_t>(n) * r), u_hat(static_cast<size_t>(r) * r);
  MulAt(a.data(), m, n, q.data(), r, bt.data());  // Bᵀ = Aᵀ·Q
  FZ_RETURN_IF_ERROR(SmallSvd(bt.data(), n, r, f, u_hat));

  // us = Q·(Û·Σ): scaling Û's columns costs R² instead of m·R.
  for (int i = 0; i < r; ++i) {
    for (int j = 0; j < r; ++j) u_hat[static_cast<size_t>(i) * r + j] *= f.singular_values[j];
  }
  f.us.resize(static_cast<size_t>(m) * r);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, r, r, 1.f, q.data(), m, u_hat.data(), r,
              0.f, f.us.data(), r);
  return f;
}

Status LowRankValueAttend(std::span<const float> p, std::span<const float> us,
                          std::span<const float> vt, std::span<const uint16_t> ranks,
                          const LowRankAttentionShape& shape, std::span<float> out) {
  constexpr std::string_view kOp = "LowRankValueAttend";
  FZ_RETURN_IF_ERROR(CheckFactors(kOp, shape, us, vt, ranks));
  const int64_t tokens = static_cast<int64_t>(ranks.size()), heads = shape.num_heads;
  const int64_t rank = shape.rank, d = shape.head_dim, hd = int64_t{shape.num_kv_heads} * d;
  FZ_RETURN_IF_ERROR(CheckSize(kOp, "p", p.size(), heads * tokens));
  FZ_RETURN_IF_ERROR(CheckSize(kOp, "out", out.size(), heads * d));

  // z [H, R] = p [H, T] · us_masked [T, R], us_masked[t, j] = us[t, j] for j < r_t, else 0: one
  // GEMM instead of T·H short vector updates (the masked copy costs T·R, as reading us does).
  thread_local std::vector<float> masked;  // reused: a fresh buffer page-faults every call
  masked.resize(static_cast<size_t>(tokens * rank));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* u = us.data() + t * rank;
    float* m = masked.data() + t * rank;
    std::copy(u, u + ranks[t], m);
    std::fill(m + ranks[t], m + rank, 0.f);
  }
  std::vector<float> z(static_cast<size_t>(heads * rank), 0.f);
  cpu::EnsureBlasSingleThreaded();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(heads),
              static_cast<int>(rank), static_cast<int>(tokens), 1.f, p.data(),
              static_cast<int>(tokens), masked.data(), static_cast<int>(rank), 0.f, z.data(),
              static_cast<int>(rank));
  // out[heads of g] += z[heads of g] · vt[:, slice g]: the rank mask is already in z.
  const int64_t group = heads / shape.num_kv_heads;
  for (int64_t g = 0; g < shape.num_kv_heads; ++g) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(group),
                static_cast<int>(d), static_cast<int>(rank), 1.f, &z[g * group * rank],
                static_cast<int>(rank), vt.data() + g * d, static_cast<int>(hd), 1.f,
                out.data() + g * group * d, static_cast<int>(d));
  }
  return absl::OkStatus();
}

Status LowRankKeyScores(std::span<const float> q, std::span<const float> us,
                        std::span<const float> vt, std::span<const uint16_t> ranks,
                        std::span<const int32_t> positions, const LowRankAttentionShape& shape,
                        const RopeParams& rope, float scale, std::span<float> scores) {
  constexpr std::string_view kOp = "LowRankKeyScores";
  FZ_RETURN_IF_ERROR(CheckFactors(kOp, shape, us, vt, ranks));
  const int64_t tokens = static_cast<int64_t>(ranks.size()), heads = shape.num_heads;
  const int64_t d = shape.head_dim, kv_heads = shape.num_kv_heads, hd = kv_heads * d;
  if (d % 2 != 0 || rope.head_dim != d) {
    return InvalidArgumentError("{}: head_dim {} with rope.head_dim {} (must be equal and even)",
                                kOp, d, rope.head_dim);
  }
  FZ_RETURN_IF_ERROR(CheckSize(kOp, "q", q.size(), heads * d));
  FZ_RETURN_IF_ERROR(CheckSize(kOp, "positions", positions.size(), tokens));
  FZ_RETURN_IF_ERROR(CheckSize(kOp, "scores", scores.size(), heads * tokens));
  for (size_t t = 0; t < positions.size(); ++t) {
    if (positions[t] < 0) {
      return InvalidArgumentError("{}: positions[{}] is {}", kOp, t, positions[t]);
    }
  }

  if (scale == 0) scale = 1.f / std::sqrt(static_cast<float>(d));
  const std::vector<float> inv_freq = RopeInverseFrequencies(rope);
  std::vector<float> step_cos(inv_freq.size()), step_sin(inv_freq.size());
  for (size_t c = 0; c < inv_freq.size(); ++c) {
    step_cos[c] = static_cast<float>(std::cos(static_cast<double>(inv_freq[c])));
    step_sin[c] = static_cast<float>(std::sin(static_cast<double>(inv_freq[c])));
  }
  const int64_t group = heads / kv_heads, tiles = (tokens + kKeyTile - 1) / kKeyTile;
  const int64_t half = d / 2;
  ComputePool().ParallelFor(tiles, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> keys(static_cast<size_t>(kKeyTile * hd));
    // The tile's angles, token by token ([kKeyTile, d/2]), for whichever path scores it.
    std::vector<float> tile_cos(static_cast<size_t>(kKeyTile * half));
    std::vector<float> tile_sin(static_cast<size_t>(kKeyTile * half));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t t0 = b * kKeyTile, n = std::min(kKeyTile, tokens - t0);
      TileAngles(inv_freq, step_cos, step_sin, positions.data(), t0, n, tile_cos.data(),
                 tile_sin.data());
      if (cpu::LowRankScoreTile(us.data(), vt.data(), ranks.data(), t0, n, shape.rank, kv_heads, d,
                                heads, q.data(), scale, tile_cos.data(), tile_sin.data(),
                                keys.data(), scores.data(), tokens)) {
        continue;
      }
      RebuildKeys(us.data(), vt.data(), ranks.data(), t0, n, shape.rank, hd, keys.data());
      RotateKeys(tile_cos.data(), tile_sin.data(), n, kv_heads, d, keys.data());
      for (int64_t h = 0; h < heads; ++h) {
        const float* key0 = keys.data() + (h / group) * d;
        for (int64_t i = 0; i < n; ++i) {
          scores[h * tokens + t0 + i] = scale * cpu::Dot(q.data() + h * d, key0 + i * hd, d);
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
