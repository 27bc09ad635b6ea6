// AttentionPack's numeric core (docs/methods.md §2): a low-rank factorisation of the visual tokens'
// K or V rows, and attention that reads the factors without rebuilding the full cache.
//
// The visual block of one layer's keys (or values), concatenated across KV heads, is an
// m × n matrix M (m = visual tokens T, n = HD = G·d). It is stored as
//   us [T, R] = U·Σ   and   vt [R, HD] = Vᵀ   (row-major, f32, host memory),
// so row t is M[t, :] ≈ us[t, :] · vt. Each token t is read back at its own rank r_t <= R,
// i.e. with the leading r_t singular directions only: M̃[t, :] = us[t, :r_t] · vt[:r_t, :].
// Keys are factorised BEFORE RoPE (§2.2 item 5): the scores rotate each rebuilt key at its
// position.
//
// Layouts: HD columns are the G KV heads of d channels, concatenated (head g owns columns
// [g·d, (g+1)·d)). Query head h reads KV head h / (H/G) (GQA).
//
// CPU only, f32, caller-owned host spans. Thread-safety: the functions keep no state; concurrent
// calls on disjoint outputs are safe. Errors: INVALID_ARGUMENT naming the first bad argument
// (sizes, ranks, head counts, positions); RandomizedSvd also INTERNAL with the LAPACK info code.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/ops/rope.h"

namespace framezip::engine::ops {

struct RandomizedSvdOptions {
  int rank = 0;              // R, 1 <= R <= min(rows, cols)
  int power_iterations = 2;  // q >= 0; torch.svd_lowrank's niter (the method uses 2)
  uint64_t seed = 0;         // seeds the Gaussian test matrix (std::mt19937_64)
};

// A rank-R factorisation A ≈ us · vt.
struct LowRankFactors {
  int64_t rows = 0;                    // m
  int64_t cols = 0;                    // n
  int rank = 0;                        // R
  std::vector<float> us;               // [m, R] row-major: U·Σ (column i scaled by σ_i)
  std::vector<float> vt;               // [R, n] row-major: Vᵀ, orthonormal rows
  std::vector<float> singular_values;  // [R], descending
};

// Randomized truncated SVD (Halko, Martinsson & Tropp 2011, Alg. 4.4 with no oversampling, as
// torch.svd_lowrank(M, q=R, niter=q)) of the row-major m × n matrix `a`:
//   Ω [n, R] ~ N(0, 1) from `seed`;  Q = orth(A·Ω);  q times: Q = orth(A·orth(Aᵀ·Q));
//   B = Qᵀ·A [R, n] = Û·Σ·Wᵀ (exact SVD);  us = Q·Û·Σ, vt = Wᵀ.
// The excess of ‖A − us·vt‖_F over the optimal rank-R error (Eckart–Young) falls like
// (σ_{R+1}/σ_R)^(2q+1): with a clear gap after σ_R it is the optimum up to f32 rounding; on a
// smooth spectrum (σ_i ∝ 0.9^i, q = 2) the squared error is about 4% above the optimum. With
// R = min(m, n) the factorisation is exact up to f32 rounding. The same seed gives the same
// factors (for one standard library: std::normal_distribution is implementation-defined).
// Cost: about (4q + 4)·m·n·R flops plus O((m + n)·R²); OpenBLAS sgemm + LAPACK (sgeqrf,
// sorgqr, sgesdd), single-threaded as every op's BLAS call (the caller parallelises).
// Errors: INVALID_ARGUMENT for rows or cols < 1 (or above INT_MAX), a.size() != rows·cols, a
// rank outside [1, min(rows, cols)], power_iterations < 0 or a non-finite entry of `a`;
// INTERNAL with the LAPACK info code if a routine fails (sgesdd not converging).
StatusOr<LowRankFactors> RandomizedSvd(std::span<const float> a, int64_t rows, int64_t cols,
                                       const RandomizedSvdOptions& options);

// Head layout of the two attention functions below; T (tokens) is ranks.size().
struct LowRankAttentionShape {
  int num_heads = 0;     // H, a multiple of G
  int num_kv_heads = 0;  // G
  int head_dim = 0;      // d; vt has HD = G·d columns
  int rank = 0;          // R: columns of us, rows of vt
};

// Values: out[h, :] += Σ_t p[h, t] · ṽ_t[head slice of h], ṽ_t = us[t, :r_t] · vt[:r_t, :],
// computed as out[h] += z[h] · vt[:, slice] with z[h] = Σ_t p[h, t] · us[t, :r_t] (zero beyond
// r_t), so the values are never rebuilt: T·H·r̄ + H·R·d multiply-adds instead of T·H·d + T·r̄·HD.
// p [H, T] attention probabilities (already normalised; the caller adds the dense tokens'
// share to `out` itself), us [T, R], vt [R, G·d], ranks [T] in [0, R] (0: the token adds
// nothing), out [H, d] accumulated into (zero it first for a plain result).
// Errors: INVALID_ARGUMENT for a non-positive or non-dividing head count, a span of the wrong
// size, or a rank outside [0, R].
Status LowRankValueAttend(std::span<const float> p, std::span<const float> us,
                          std::span<const float> vt, std::span<const uint16_t> ranks,
                          const LowRankAttentionShape& shape, std::span<float> out);

// Keys: scores[h, t] = scale · q[h] · RoPE_{positions[t]}(k̃_t[head slice of h]), where
// k̃_t = us[t, :r_t] · vt[:r_t, :] is the PRE-RoPE key. Keys are rebuilt a tile of tokens at a
// time into a per-task buffer (never all T rows), rotated with the half-split RoPE of ops/rope.h
// (the same f32 angles as ApplyRope), then dotted with the queries of each KV head.
// q [H, d] post-RoPE queries, us [T, R], vt [R, G·d], ranks [T] in [0, R], positions [T] >= 0,
// rope.head_dim == d (even); scale 0 means 1/sqrt(d). scores [H, T] is overwritten.
// Parallel over token tiles on ComputePool().
// Errors: INVALID_ARGUMENT as for LowRankValueAttend, plus an odd d, rope.head_dim != d or a
// negative position.
Status LowRankKeyScores(std::span<const float> q, std::span<const float> us,
                        std::span<const float> vt, std::span<const uint16_t> ranks,
                        std::span<const int32_t> positions, const LowRankAttentionShape& shape,
                        const RopeParams& rope, float scale, std::span<float> scores);

}  // namespace framezip::engine::ops
