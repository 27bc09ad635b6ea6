// ZipVL's adaptive important-token count and split (docs/methods.md §1.1 steps 5 and 7).
//
//   p = min{ k : Σ_{r<k} a_sorted(r) >= τ · Σ_j a_j }       a sorted descending (Eq. 6)
//   T = the p tokens with the largest ã, sorted ascending   (Eq. 8)
//
// Eq. 6 uses the raw score a, the split uses the normalized ã. Ties are broken by the lower
// index first, so the result depends only on the scores. With τ >= 1 every token with a_j > 0
// is kept (floating-point sums must not drop a tiny but nonzero mass).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace framezip::engine::compress {

// The minimal p of Eq. 6 (0 when every a_j is 0). Sums run in f64 over the sorted scores.
int64_t AdaptiveCount(std::span<const float> a, double tau);

// Indices of the `p` largest scores (ties: lower index first), sorted ascending.
std::vector<int32_t> TopIndices(std::span<const float> score, int64_t p);

}  // namespace framezip::engine::compress
