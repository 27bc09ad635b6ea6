#include "server/media_probe.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "common/client_text.h"
#include "media/content_hash.h"

namespace framezip::server {

UploadLimits UploadLimitsFrom(const ServerConfig& config) {
  UploadLimits limits;
  limits.max_upload_bytes = static_cast<uint64_t>(config.max_upload_bytes);
  limits.max_duration_seconds = config.max_video_seconds;
  limits.max_frames = static_cast<uint32_t>(config.max_frames);
  return limits;
}

media::MediaLimits MediaLimitsFor(const UploadLimits& limits, uint32_t frames) {
  media::MediaLimits m;
  m.max_bytes = static_cast<int64_t>(limits.max_upload_bytes);
  m.max_duration_s = limits.max_duration_seconds;
  m.max_width = limits.max_width;
  m.max_height = limits.max_height;
  m.max_frames = static_cast<int>(std::max(frames, limits.max_frames));
  m.max_decode_s = limits.max_probe_seconds;
  return m;
}

media::FrameSamplingSpec ChatSampling(const MediaInfo& info) {
  media::FrameSamplingSpec sampling;
  sampling.mode = media::FrameSamplingSpec::Mode::kUniform;
  sampling.num_frames = std::max<int>(1, static_cast<int>(info.frame_timestamps.size()));
  return sampling;
}

StatusOr<MediaInfo> ValidateMedia(media::MediaBackend& backend, const std::filesystem::path& file,
                                  const std::string& declared_mime, const UploadLimits& limits,
                                  const FrameSpec& frames, const VisionDescription& vision,
                                  uint32_t max_frames) {
  const media::MediaSource source =
      media::MediaSource::FromFile(file.parent_path(), file.filename().string());
  StatusOr<media::MediaInfo> probed =
      backend.Probe(source, MediaLimitsFor(limits, max_frames));
  if (!probed.ok()) return probed.status();
  const media::MediaInfo& p = *probed;
  MediaInfo info;
  info.kind = p.kind == media::MediaKind::kImage ? MediaKind::kImage : MediaKind::kVideo;
  info.mime_type = p.mime_type.empty() ? declared_mime : p.mime_type;
  if (!declared_mime.empty() && declared_mime.rfind("image/", 0) == 0 &&
      info.kind == MediaKind::kVideo) {
    return InvalidArgumentError("metadata.mime_type says '{}' but the bytes are a video ({})",
                                ClientText(declared_mime), p.codec);
  }
  info.size_bytes = static_cast<uint64_t>(std::max<int64_t>(p.size_bytes, 0));
  info.content_hash = media::ToHex(p.content_hash);
  info.duration_seconds = p.duration_s;
  info.fps = p.fps;
  info.width = static_cast<uint32_t>(std::max(p.width, 0));
  info.height = static_cast<uint32_t>(std::max(p.height, 0));
  info.codec = p.codec;
  info.container = p.container;
  info.frames = frames;
  PlanFrames(frames, vision, max_frames, info);

  // Decode what a Chat will decode. The content hash is known now: the check need not hash again.
  media::DecodeOptions options;
  options.known_content_hash = p.content_hash;
  const media::FrameSamplingSpec sampling = ChatSampling(info);
  StatusOr<media::DecodedMedia> verified = backend.Verify(
      source, sampling,
      MediaLimitsFor(limits, std::max<uint32_t>(max_frames, sampling.num_frames)), options);
  if (!verified.ok()) return verified.status();
  if (verified->timestamps_s.size() != info.frame_timestamps.size() &&
      info.kind == MediaKind::kVideo) {
    return InvalidArgumentError("only {} of the {} planned frames could be decoded",
                                verified->timestamps_s.size(), info.frame_timestamps.size());
  }
  return info;
}

void PlanFrames(const FrameSpec& frames, const VisionDescription& vision, uint32_t max_frames,
                MediaInfo& info) {
  info.frame_timestamps.clear();
  if (info.kind == MediaKind::kImage) {
    info.frame_timestamps.push_back(0);
    // An upload does not know its turn: counted as a turn's only image, the larger count.
    info.visual_tokens = vision.sole_image_tokens
                             ? vision.sole_image_tokens(info.height, info.width)
                             : vision.tokens_per_image;
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
  info.visual_tokens = n * vision.tokens_per_video_frame + vision.tokens_per_video;
}

}  // namespace framezip::server
