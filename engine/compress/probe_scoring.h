// ZipVL's probe-based token scoring (docs/methods.md §1.1 steps 2-4 and 6), on the CPU in f32.
//
//   P      = the `recent` most recent tokens ∪ `random` tokens drawn uniformly from the rest
//            (every token when n <= recent + random), sorted ascending
//   A'     = softmax(Q_P Kᵀ/√d + causal mask)         [H, |P|, n], f32, explicit (not flash)
//   a_j    = Σ_{h ∈ group} Σ_{i ∈ P} A'[h, i, j]       accumulated score
//   c_j    = |{i ∈ P : i >= j}|                         probes that can see token j
//   ã_j    = a_j / c_j                                  normalized score (0 where c_j = 0)
//
// A "group" is every query head (head-shared selection, the default: Σ_j a_j = H·|P|) or the
// query heads of one KV head (per-KV-head selection, ZipCache's way: Σ_j a_j = (H/G)·|P|).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::compress {

// Probe indices into [0, n), sorted ascending, deterministic in `seed`.
std::vector<int32_t> SelectProbes(int64_t n, int64_t recent, int64_t random, uint64_t seed);

struct ProbeScores {
  int groups = 1;               // 1 (head-shared) or G (per KV head)
  int64_t n = 0;                // scored tokens
  std::vector<float> a;         // [groups, n] accumulated score
  std::vector<float> a_norm;    // [groups, n] normalized score ã
  std::vector<int32_t> counts;  // [n] c_j
};

struct ProbeScoringParams {
  int heads = 0;     // H query heads
  int kv_heads = 0;  // G (H % G == 0)
  int head_dim = 0;  // d
  bool per_kv_head = false;
};

// Scores the n tokens of q [n, H, d] and k [n, G, d] (row-major f32, post-RoPE) with the probe
// rows `probes` (sorted, in [0, n)). Work is spread over ComputePool().
StatusOr<ProbeScores> ScoreProbes(const float* q, const float* k, int64_t n,
                                  std::span<const int32_t> probes,
                                  const ProbeScoringParams& params);

// The same for q [n, H, d] and k [n, G, d] f32 tensors on one device: on the CPU the function
// above; on a GPU scored there (ops::ProbeScoresCuda, equal to it within f32 rounding) and only
// the scores, 2·groups·n floats and n counts, copied to the host. INVALID_ARGUMENT for shapes
// that do not fit.
StatusOr<ProbeScores> ScoreProbes(const Tensor& q, const Tensor& k, std::span<const int32_t> probes,
                                  bool per_kv_head);

}  // namespace framezip::engine::compress
