#include "engine/compress/top_p.h"

#include <algorithm>
#include <numeric>

namespace framezip::engine::compress {
namespace {

// Descending by score, then ascending by index: a strict total order, hence deterministic.
struct ByScoreDesc {
  std::span<const float> score;
  bool operator()(int32_t x, int32_t y) const {
    const float sx = score[static_cast<size_t>(x)], sy = score[static_cast<size_t>(y)];
    return sx != sy ? sx > sy : x < y;
  }
};

}  // namespace

int64_t AdaptiveCount(std::span<const float> a, double tau) {
  const int64_t n = static_cast<int64_t>(a.size());
  if (tau >= 1.0) {
    return std::count_if(a.begin(), a.end(), [](float x) { return x > 0.f; });
  }
  std::vector<float> sorted(a.begin(), a.end());
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  // The total is summed in the same (sorted) order as the prefixes, so the prefix at k = n equals
  // it exactly and the threshold is always reached.
  double total = 0;
  for (float x : sorted) total += x;
  if (total <= 0) return 0;
  const double threshold = tau * total;
  double prefix = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (prefix >= threshold) return k;
    prefix += sorted[static_cast<size_t>(k)];
  }
  return n;
}

std::vector<int32_t> TopIndices(std::span<const float> score, int64_t p) {
  const int64_t n = static_cast<int64_t>(score.size());
  p = std::clamp<int64_t>(p, 0, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  if (p < n) {
    std::nth_element(idx.begin(), idx.begin() + p, idx.end(), ByScoreDesc{score});
    idx.resize(static_cast<size_t>(p));
  }
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace framezip::engine::compress
