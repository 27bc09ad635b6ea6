#include "media/frame_sampling.h"

#include <algorithm>
#include <cmath>

namespace framezip::media {
namespace {

std::vector<double> Uniform(int64_t n, double duration_s) {
  std::vector<double> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    t[i] = static_cast<double>(i) * duration_s / static_cast<double>(n);
  return t;
}

}  // namespace

Status ValidateSamplingSpec(const FrameSamplingSpec& spec, const MediaLimits& limits) {
  if (spec.num_frames < 1) {
    return InvalidArgumentError("num_frames must be at least 1 (got {})", spec.num_frames);
  }
  if (spec.num_frames > limits.max_frames) {
    return InvalidArgumentError("requested {} frames; the limit is {} (max_frames)",
                                spec.num_frames, limits.max_frames);
  }
  if (spec.mode == FrameSamplingSpec::Mode::kFps && (!std::isfinite(spec.fps) || spec.fps <= 0)) {
    return InvalidArgumentError("sampling fps must be a positive number (got {})", spec.fps);
  }
  return absl::OkStatus();
}

std::vector<double> PlanSampleTimes(const FrameSamplingSpec& spec, double duration_s, double fps,
                                    int64_t frame_count) {
  if (!(duration_s > 0) || !std::isfinite(duration_s)) return {0.0};
  int64_t available = frame_count > 0 ? frame_count : 0;
  if (available == 0 && fps > 0) available = std::max<int64_t>(1, std::llround(duration_s * fps));
  int64_t cap = spec.num_frames;
  if (available > 0) cap = std::min(cap, available);

  if (spec.mode == FrameSamplingSpec::Mode::kUniform) return Uniform(cap, duration_s);

  // fps mode: never faster than the video itself, then every 1/rate seconds from 0.
  const double rate = fps > 0 ? std::min(spec.fps, fps) : spec.fps;
  const double count_d = std::ceil(duration_s * rate - 1e-9);
  const int64_t count = std::max<int64_t>(1, static_cast<int64_t>(std::min(count_d, 1e12)));
  if (count > spec.num_frames) return Uniform(cap, duration_s);
  std::vector<double> t(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) t[i] = static_cast<double>(i) / rate;
  return t;
}

}  // namespace framezip::media
