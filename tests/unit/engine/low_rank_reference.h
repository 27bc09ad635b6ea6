// The float64 references of AttentionPack's numeric core (engine/ops/low_rank.h), shared by its
// CPU tests (low_rank_test.cc) and its device cases (low_rank_device_test.cc): matrices of known
// spectrum for the randomized SVD, random blocks of factors in each stored format, and decode
// attention over a block as "rebuild each row at its rank, then attend" in double.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/kv/low_rank_factor.h"
#include "engine/ops/low_rank.h"

namespace framezip::engine::ops::reference {

using Columns = std::vector<std::vector<double>>;  // a matrix as its columns

// k orthonormal columns of length m (m >= k): Gram–Schmidt QR of a Gaussian matrix, each
// column projected twice so the basis is orthonormal to double precision.
Columns RandomOrthonormal(int64_t m, int64_t k, std::mt19937_64& rng);

// k = min(m, n) singular values decaying by 5% a step, with a 20× drop after the first `rank`.
// Without oversampling, randomized SVD resolves σ_1..σ_R to about (σ_{R+1}/σ_R)^(2q+1) (q = 2
// power iterations); the gap makes 1e-3 a fair bar for every seed, while the tail stays far
// above f32 rounding so the Eckart–Young comparison has teeth.
std::vector<double> GappedSpectrum(int64_t k, int64_t rank);

// A = X·diag(σ)·Yᵀ, m × n row-major, with orthonormal X [m, k] and Y [n, k].
std::vector<double> MatrixWithSpectrum(int64_t m, int64_t n, const std::vector<double>& sigma,
                                       std::mt19937_64& rng);

std::vector<float> ToFloat(const std::vector<double>& x);

// ‖A − us·vt‖_F² in double.
double ReconstructionError2(const std::vector<double>& a, const LowRankFactors& f);

// The largest deviation of vt·vtᵀ from the identity (the rows of vt are orthonormal).
double OrthonormalityError(const LowRankFactors& f);

// Random factors with AttentionPack's two groups (docs/methods.md §2.3): a random 25% of the
// tokens at rank R, the rest at R/4, and one token at rank 0 (it must contribute nothing).
struct Factors {
  std::vector<float> us, vt;
  std::vector<uint16_t> ranks;
};
Factors MixedRankFactors(int64_t tokens, int rank, int64_t hd, std::mt19937_64& rng);

// Row t rebuilt at its rank, all HD columns, in double.
std::vector<double> RebuiltRow(const Factors& f, int64_t t, int rank, int64_t hd);

// The engine's half-split RoPE (rope.h) in double: the angle is the f32 product
// float(pos)·inv_freq[i] as ApplyRope forms it, its cos/sin and the rotation in double.
void RotateHalfSplit(std::vector<double>& x, int32_t pos, const std::vector<float>& inv_freq);

// RoPE of head size d: θ = 10000, or Llama 3's (θ = 500000, factor 8).
RopeParams MakeRope(int d, bool llama3);

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

// `x` [rows, cols] stored in format 0 (f32), 1 (f16) or 2 (int4).
StoredFactor Store(const std::vector<float>& x, int64_t rows, int64_t cols, int format);

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
                              std::mt19937_64& rng);

// Ascending positions in runs: mostly consecutive, with a jump every so often (a block of visual
// tokens that ZipVL or a text turn interrupted).
std::vector<int32_t> RunsOfPositions(int64_t tokens, std::mt19937_64& rng);

// The reference of LowRankBlockAttend in double: scores of rotated rebuilt keys, the block's own
// maxima, sums and unnormalised value sums.
struct Reference {
  std::vector<double> s, max, sum, out, out_mass;  // out_mass[h·d + c] = Σ_t w·|ṽ_t[c]|
  double score_tol = 0;                            // the largest per-score tolerance
};

Reference AttendInDouble(const std::vector<float>& q, const std::vector<float>& us_k,
                         const std::vector<float>& vt_k, int rank_k, const Factors& values,
                         int rank_v, const std::vector<int32_t>& positions, int heads, int kv_heads,
                         int d, const RopeParams& rope, double scale);

}  // namespace framezip::engine::ops::reference
