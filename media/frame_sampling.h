// Which timestamps to sample (pure arithmetic; see FrameSamplingSpec for the rules).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "media/media_types.h"

namespace framezip::media {

// INVALID_ARGUMENT for num_frames < 1, fps <= 0 or non-finite in fps mode, and for a request of
// more frames than limits.max_frames ("requested 600 frames; the limit is 512 (max_frames)").
Status ValidateSamplingSpec(const FrameSamplingSpec& spec, const MediaLimits& limits);

// Target times in seconds, ascending, in [0, duration_s). `fps` and `frame_count` describe the
// stream (0 when unknown) and cap the count so a short clip does not return the same frame twice.
std::vector<double> PlanSampleTimes(const FrameSamplingSpec& spec, double duration_s, double fps,
                                    int64_t frame_count);

}  // namespace framezip::media
