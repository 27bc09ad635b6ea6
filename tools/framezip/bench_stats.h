// Order statistics the serving benchmarks (bench server, bench sessions) report over their
// latency samples and per-round rates, and the client-side timing of one streamed answer.
#pragma once

#include <algorithm>
#include <chrono>
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

// One streamed answer as the client sees it: the time to its first delta and the gaps between
// its tokens. The server merges tokens into one delta while its previous write is in flight, so
// a delta of k tokens after a gap g counts as k tokens each g/k apart.
class StreamTiming {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StreamTiming(Clock::time_point start) : start_(start), last_(start) {}

  void OnDelta(Clock::time_point now, int tokens) {
    if (ttft_ < 0) {
      ttft_ = std::chrono::duration<double>(now - start_).count();
    } else {
      const int k = std::max(1, tokens);
      const double gap = std::chrono::duration<double>(now - last_).count();
      gaps_.insert(gaps_.end(), static_cast<size_t>(k), gap / k);
    }
    last_ = now;
  }

  double ttft() const { return ttft_; }  // seconds; -1 before the first delta
  const std::vector<double>& gaps() const { return gaps_; }

 private:
  Clock::time_point start_, last_;
  double ttft_ = -1;
  std::vector<double> gaps_;
};

}  // namespace framezip::cli
