#include "server/media_probe.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "media/content_hash.h"
#include "media/media.h"

namespace framezip::server {

StatusOr<MediaInfo> ProbeUpload(std::span<const uint8_t> bytes, const std::string& declared_mime,
                                const UploadLimits& limits) {
  media::MediaLimits media_limits;
  media_limits.max_bytes = static_cast<int64_t>(limits.max_upload_bytes);
  media_limits.max_duration_s = limits.max_duration_seconds;
  media_limits.max_width = limits.max_width;
  media_limits.max_height = limits.max_height;
  media_limits.max_frames = static_cast<int>(limits.max_frames);
  media_limits.max_decode_s = limits.max_probe_seconds;
  StatusOr<media::MediaInfo> probed = InternalError("probe did not run");
  try {
    probed = media::ProbeMedia(media::MediaSource::FromBytes(bytes), media_limits);
  } catch (const std::exception& e) {
    return InvalidArgumentError("the media could not be read: {}", e.what());
  }
  if (!probed.ok()) return probed.status();
  const media::MediaInfo& p = *probed;
  MediaInfo info;
  info.kind = p.kind == media::MediaKind::kImage ? MediaKind::kImage : MediaKind::kVideo;
  info.mime_type = p.mime_type.empty() ? declared_mime : p.mime_type;
  if (!declared_mime.empty() && declared_mime.rfind("image/", 0) == 0 &&
      info.kind == MediaKind::kVideo) {
    return InvalidArgumentError("metadata.mime_type says '{}' but the bytes are a video ({})",
                                declared_mime, p.codec);
  }
  info.size_bytes = bytes.size();
  info.content_hash = media::ToHex(p.content_hash);
  info.duration_seconds = p.duration_s;
  info.fps = p.fps;
  info.width = static_cast<uint32_t>(std::max(p.width, 0));
  info.height = static_cast<uint32_t>(std::max(p.height, 0));
  info.codec = p.codec;
  info.container = p.container;
  return info;
}

void PlanFrames(const FrameSpec& frames, const VisionDescription& vision, uint32_t max_frames,
                MediaInfo& info) {
  info.frame_timestamps.clear();
  if (info.kind == MediaKind::kImage) {
    info.frame_timestamps.push_back(0);
    info.visual_tokens = vision.tokens_per_image;
    return;
  }
  const double start = std::max(0.0, frames.start_seconds);
  const double end = frames.end_seconds > 0 ? std::min(frames.end_seconds, info.duration_seconds)
                                            : info.duration_seconds;
  const double span = std::max(0.0, end - start);
  uint32_t cap = frames.max_frames > 0 ? frames.max_frames : max_frames;
  if (cap == 0) cap = 1;
  uint32_t n = 0;
  if (frames.num_frames > 0) {
    n = frames.num_frames;
  } else if (frames.fps > 0) {
    n = static_cast<uint32_t>(std::ceil(span * frames.fps));
  } else {
    n = vision.default_num_frames > 0 ? vision.default_num_frames : 8;
  }
  n = std::clamp<uint32_t>(n, 1, cap);
  // Never more frames than the clip has.
  if (info.fps > 0) {
    n = std::min<uint32_t>(n, std::max<uint32_t>(1, static_cast<uint32_t>(span * info.fps)));
  }
  for (uint32_t i = 0; i < n; ++i) info.frame_timestamps.push_back(start + span * i / n);
  info.visual_tokens = n * vision.tokens_per_video_frame;
}

}  // namespace framezip::server
