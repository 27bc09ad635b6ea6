// AttentionPack's numeric core (docs/methods.md §2): a low-rank factorisation of the visual tokens'
// K or V rows, and decode attention that reads the factors without rebuilding the full cache.
//
// The visual block of one layer's keys (or values), concatenated across KV heads, is an
// m × n matrix M (m = visual tokens T, n = HD = G·d). It is stored as
//   us [T, R] = U·Σ   and   vt [R, HD] = Vᵀ   (row-major; RandomizedSvd gives f32, a block keeps
//   f16 or int4: FactorView),
// so row t is M[t, :] ≈ us[t, :] · vt. Each token t is read back at its own rank r_t <= R,
// i.e. with the leading r_t singular directions only: M̃[t, :] = us[t, :r_t] · vt[:r_t, :].
// Keys are factorised BEFORE RoPE (§2.2 item 5): the scores rotate each rebuilt key at its
// position.
//
// Layouts: HD columns are the G KV heads of d channels, concatenated (head g owns columns
// [g·d, (g+1)·d)). Query head h reads KV head h / (H/G) (GQA).
//
// CPU, caller-owned host memory (the GPU versions: low_rank_cuda.h). Thread-safety: the functions
// keep no state; concurrent calls on disjoint outputs are safe. Errors: INVALID_ARGUMENT naming the
// first bad argument (sizes, ranks, head counts, positions); RandomizedSvd also INTERNAL with the
// LAPACK info code.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/ops/factor_view.h"
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

// Head layout of LowRankBlockAttend.
struct LowRankAttentionShape {
  int num_heads = 0;     // H, a multiple of G
  int num_kv_heads = 0;  // G
  int head_dim = 0;      // d; the factors' HD = G·d
};

// One low-rank block as decode reads it: T tokens' pre-RoPE keys and values as factors in their
// stored formats, the tokens' positions and the rank each value is read at.
struct LowRankBlockView {
  FactorView key_us;                      // [T, R_k]
  FactorView key_vt;                      // [R_k, G·d]
  FactorView value_us;                    // [T, R_v]
  FactorView value_vt;                    // [R_v, G·d]
  std::span<const int32_t> positions;     // [T], >= 0
  std::span<const uint16_t> value_ranks;  // [T], each in [0, R_v] (0: the value adds nothing)
};

// A block's share of one decode step's attention, in the split form of flash-decoding: the
// caller merges it with the other parts (pages, other blocks) by their maxima,
//   out_h = Σ_parts e^(max_p − M)·out_p / Σ_parts e^(max_p − M)·sum_p,  M = max_p max_p.
struct BlockAttention {
  std::vector<float> max;  // [H] m_h = max_t s[h, t] (-inf for an empty block)
  std::vector<float> sum;  // [H] Σ_t e^(s[h, t] − m_h)
  std::vector<float> out;  // [H, d] Σ_t e^(s[h, t] − m_h) · ṽ_t[head slice of h], not normalised
};

// Decode attention of one query row over a low-rank block, never rebuilding the block:
//   s[h, t] = scale · q[h] · RoPE_{positions[t]}(us_k[t] · vt_k)[slice of h]   (keys at full R_k)
//   ṽ_t = us_v[t, :r_t] · vt_v[:r_t, :]                                        (values at r_t)
// Keys are rebuilt a tile of tokens at a time and rotated with the half-split RoPE of ops/rope.h
// (the f32 angles of ApplyRope); values are never rebuilt: out_h = (Σ_t w[h, t]·us_v[t, :r_t])
// · vt_v, so a token costs R_v multiply-adds per head instead of G·d. Factors are widened a chunk
// of rows at a time (FactorView), per task, so an f16 or int4 block is never copied whole.
// q [H, d] post-RoPE queries; scale 0 means 1/sqrt(d); rope.head_dim == d (even).
// weights [H, T] receives e^(s[h, t] − m_h) (the caller's attention-importance statistics).
// Parallel over chunks of tokens on ComputePool().
// Errors: INVALID_ARGUMENT naming the first bad argument: head counts, a view whose shape does
// not match the others or whose pointer for its format is null, a rank outside [0, R_v], a
// negative position, an odd d or rope.head_dim != d, spans of the wrong size.
Status LowRankBlockAttend(std::span<const float> q, const LowRankBlockView& block,
                          const LowRankAttentionShape& shape, const RopeParams& rope, float scale,
                          std::span<float> weights, BlockAttention& result);

}  // namespace framezip::engine::ops
