// The server's calls into the media stage: validating an upload the way a later Chat will use it,
// and planning which frames the model will see. Kept in one file so the media stage's API can
// change without touching the gRPC layer.
//
// Thread-safe; slow (opens the container and decodes frames), so it runs on a worker pool, never
// in a reaction. The decoding itself runs wherever the given media::MediaBackend runs it (the
// server's sandboxed worker processes by default).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/status.h"
#include "media/media_backend.h"
#include "server/config.h"
#include "server/turn_types.h"

namespace framezip::server {

struct UploadLimits {
  uint64_t max_upload_bytes = 512ull << 20;
  double max_duration_seconds = 4 * 3600.0;
  int max_width = 8192;
  int max_height = 8192;
  uint32_t max_frames = 64;
  double max_probe_seconds = 30;
};

// The upload limits `config` sets (max_upload_bytes, max_video_seconds, max_frames).
UploadLimits UploadLimitsFrom(const ServerConfig& config);

// The media limits an upload is checked under, and a Chat decodes under (the same ones, so what
// passed at upload passes at Chat).
media::MediaLimits MediaLimitsFor(const UploadLimits& limits, uint32_t frames);

// The sampling a Chat decodes `info` with: its planned frame_timestamps, uniformly.
media::FrameSamplingSpec ChatSampling(const MediaInfo& info);

// Validates the media stored at `file` (an upload, or Generate's inline media) as a Chat will use
// it: probes the container and stream (kind, codec, size, duration, hash), plans the frames the
// model will see from `frames` (the media's own sampling or the session's), then decodes exactly
// those frames. INVALID_ARGUMENT: not media, no video stream, unsupported codec, corrupt or
// truncated (with the time), fewer frames decodable than planned; RESOURCE_EXHAUSTED: over a
// limit (value and limit in the message); the media backend's own errors (a worker that crashed
// or hit its memory or CPU limit). Fills every MediaInfo field but media_id, name and path.
StatusOr<MediaInfo> ValidateMedia(media::MediaBackend& backend, const std::filesystem::path& file,
                                  const std::string& declared_mime, const UploadLimits& limits,
                                  const FrameSpec& frames, const VisionDescription& vision,
                                  uint32_t max_frames);

// Chooses the frames the model will see from `frames` (the media's own or the session's
// sampling) and the model's defaults: fills frame_timestamps and visual_tokens.
void PlanFrames(const FrameSpec& frames, const VisionDescription& vision, uint32_t max_frames,
                MediaInfo& info);

}  // namespace framezip::server
