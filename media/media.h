// The media stage's public API (contract in media/README.md): turns an uploaded buffer or a file
// under the media root into the frames a vision model needs, or into an error a person can act on.
//
//   media::PreprocessSpec spec;  // from the model's preprocessor config
//   auto decoded = media::DecodeMedia(media::MediaSource::FromBytes(upload),
//                                     {.num_frames = 32}, spec, limits);
//   // decoded->frames: [N, 3, H, W] float32; decoded->timestamps_s[i]: time of frame i.
//
// Thread-safety: every call is independent (no shared state besides FFmpeg's one-time logging
// setup); run as many at once as there are cores to spare. Each call is bounded in time by
// limits.max_decode_s and in memory by the decoder's working set (a few frames) plus the output.
//
// Errors (every message names the cause):
//  INVALID_ARGUMENT   not a media file; unsupported container or codec; no video stream;
//                     corrupt or truncated (with the time); bad sampling/preprocess spec;
//                     more frames requested than max_frames.
//  RESOURCE_EXHAUSTED over max_bytes, max_duration_s, max_width x max_height or
//                     max_output_bytes (the limit's name, the value and the limit).
//  DEADLINE_EXCEEDED  the call took longer than max_decode_s.   CANCELLED: *cancel became true.
//  NOT_FOUND / PERMISSION_DENIED / FAILED_PRECONDITION  for file sources (see file_access.h).
#pragma once

#include <atomic>
#include <optional>

#include "common/status.h"
#include "media/media_types.h"
#include "media/sniff.h"

namespace framezip::media {

struct DecodeOptions {
  // Polled during the call; set it to true (e.g. when the gRPC call is cancelled) to stop early.
  const std::atomic<bool>* cancel = nullptr;
  // The content hash when the caller already has it (computed by ProbeMedia at upload time):
  // skips hashing, which for a large file means reading all of it once more.
  std::optional<ContentHash> known_content_hash;
  // The frames go into a memfd (FrameData::Storage::kMemfd), for a media worker to hand to the
  // server without a copy.
  bool frames_in_memfd = false;
};

// Metadata only: opens the container (or reads the image header), checks every limit that the
// metadata allows (bytes, duration, resolution), and hashes the content. Decodes no frame beyond
// FFmpeg's stream probing. Use at upload time to reject bad media before storing it.
StatusOr<MediaInfo> ProbeMedia(const MediaSource& source, const MediaLimits& limits,
                               const DecodeOptions& options = {});

// Samples frames per `sampling` and preprocesses them per `preprocess`. An image gives one frame
// at t = 0. The output batch has one shape: PreprocessedSize(preprocess, info.width, info.height).
StatusOr<DecodedMedia> DecodeMedia(const MediaSource& source, const FrameSamplingSpec& sampling,
                                   const PreprocessSpec& preprocess, const MediaLimits& limits,
                                   const DecodeOptions& options = {});

// What DecodeMedia would do, short of preprocessing: opens the media, checks every limit, decodes
// and converts to RGB exactly the frames `sampling` picks, and returns the info, the frame and
// target timestamps and the decode stats, with `frames` left empty. Upload validation runs it so
// that a later DecodeMedia with the same sampling does not fail on the media.
StatusOr<DecodedMedia> VerifyMedia(const MediaSource& source, const FrameSamplingSpec& sampling,
                                   const MediaLimits& limits, const DecodeOptions& options = {});

// Decodes the whole video stream sequentially without converting frames; returns the number of
// frames decoded. For benchmarks and diagnostics.
StatusOr<int64_t> DecodeAllFrames(const MediaSource& source, const MediaLimits& limits);

}  // namespace framezip::media
