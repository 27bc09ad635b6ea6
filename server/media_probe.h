// The server's one call into the media stage at upload time: check that uploaded bytes are media
// the engine can decode (container, codec, limits) and describe them, and plan which frames the
// model will see. Kept in one file so the media stage's API can change without touching the
// gRPC layer.
//
// Thread-safe; slow (opens the container), so it runs on a worker pool, never in a reaction.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
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

// Probes `bytes` (the whole upload). INVALID_ARGUMENT: not media, no video stream, unsupported
// codec, corrupt; RESOURCE_EXHAUSTED: over a limit (value and limit in the message). Fills kind,
// mime_type, size, content_hash, duration, fps, size, codec and container.
StatusOr<MediaInfo> ProbeUpload(std::span<const uint8_t> bytes, const std::string& declared_mime,
                                const UploadLimits& limits);

// Chooses the frames the model will see from `frames` (the media's own or the session's
// sampling) and the model's defaults: fills frame_timestamps and visual_tokens.
void PlanFrames(const FrameSpec& frames, const VisionDescription& vision, uint32_t max_frames,
                MediaInfo& info);

}  // namespace framezip::server
