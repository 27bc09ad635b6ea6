// The wall-clock budget of one media call plus the caller's cancellation flag. FFmpeg's interrupt
// callback and our read callbacks poll it, so neither a slow demuxer nor a hostile file can hold a
// thread past the limit. Internal to media/.
#pragma once

#include <atomic>
#include <chrono>

namespace framezip::media::internal {

class Deadline {
 public:
  Deadline(double seconds, const std::atomic<bool>* cancel)
      : limit_s_(seconds),
        end_(std::chrono::steady_clock::now() +
             std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                 std::chrono::duration<double>(seconds))),
        cancel_(cancel) {}

  bool Cancelled() const { return cancel_ != nullptr && cancel_->load(std::memory_order_relaxed); }
  bool TimedOut() const { return std::chrono::steady_clock::now() >= end_; }
  bool Expired() const { return Cancelled() || TimedOut(); }
  double limit_s() const { return limit_s_; }

 private:
  double limit_s_;
  std::chrono::steady_clock::time_point end_;
  const std::atomic<bool>* cancel_;
};

}  // namespace framezip::media::internal
