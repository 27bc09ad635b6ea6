// Order statistics the serving benchmarks (bench server, bench sessions) report over their
// latency samples and per-round rates.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace framezip::cli {

// The nearest-rank p-quantile (p in [0, 1]) of `v`; 0 for no samples.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

// The median of `v` (the mean of the middle two for an even count); 0 for no samples.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace framezip::cli
