// AttentionPack's randomized SVD on the CPU (contract in low_rank.h). It keeps every matrix LAPACK
// touches column-major, so the row-major input is read as its transpose and no copy is made.
// Decode attention over the factors is low_rank_attend_cpu.cc.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <random>
#include <string_view>
#include <vector>

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

}  // namespace framezip::engine::ops
