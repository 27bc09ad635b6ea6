// Frames that are already decoded: packed 8-bit RGB rows with their presentation times, sent by
// clients that decode on their own (NVDEC pipelines, camera systems) or have no codec stack.
//
// The server stores such an upload as a raw-frames file, so that it travels like any container
// (the session's media directory, the media workers' descriptors, the content hash that keys the
// KV cache) and the media stage samples it as it samples a video (media.h): no codec touches it.
// Layout, little-endian:
//
//   offset 0   "FZRGB24\0"            magic (8 bytes)
//          8   u32 version = 1
//         12   u32 width, u32 height, u32 stride_bytes, u32 frame_count
//         28   u32 0 (reserved)
//         32   i64 duration_us        the clip's length, as resolved by ResolvedDurationUs
//         40   i64 timestamps_us[frame_count]
//         40 + 8 * frame_count:       frame_count * height * stride_bytes pixel bytes; frame i row
//                                     y starts at (i * height + y) * stride_bytes, its first
//                                     3 * width bytes are R, G, B per pixel, the rest padding.
//
// No FFmpeg or OpenCV here: the server's edge validation and the file writer use this too.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace framezip::media {

// The MIME type of raw frames (Media.mime_type, and what an upload may declare).
inline constexpr char kRawFramesMimeType[] = "video/x-raw-rgb24";
// Media.container and Media.codec of raw frames.
inline constexpr char kRawFramesContainer[] = "rgb24-frames";
inline constexpr char kRawFramesCodec[] = "rawvideo";
// At most this many frames in one upload (the timestamps travel in one gRPC message).
inline constexpr int64_t kMaxRawFrames = 65536;
inline constexpr size_t kRawFramesFixedHeaderBytes = 40;

// What a client states about its frames. Signed so that a negative value from a parser or a
// caller is caught by CheckRawFrames rather than wrapped around.
struct RawFrames {
  int64_t width = 0;
  int64_t height = 0;
  int64_t stride_bytes = 0;  // bytes from one row's start to the next's, >= 3 * width
  int64_t frame_count = 0;
  std::vector<int64_t> timestamps_us;  // one per frame, >= 0, strictly increasing
  int64_t duration_us = 0;             // 0 = ResolvedDurationUs derives it
};

// The limits a decoded video is held to (media::MediaLimits' max_width, max_height,
// max_duration_s), applied to raw frames.
struct RawFrameLimits {
  int64_t max_width = 8192;
  int64_t max_height = 8192;
  double max_duration_s = 4 * 3600.0;
  int64_t max_frames = kMaxRawFrames;
};

// INVALID_ARGUMENT naming the field as `{field}.width` etc.: width or height < 1 or over the
// limit, stride_bytes < 3 * width or over 2^31, frame_count < 1 or over the limit, a timestamp
// count other than frame_count, a negative or non-increasing timestamp, a clip longer than
// max_duration_s, a duration_us that is negative or not after the last timestamp.
Status CheckRawFrames(const RawFrames& frames, const RawFrameLimits& limits,
                      std::string_view field);

// stride_bytes * height * frame_count: the pixel payload's exact size. Call after CheckRawFrames
// (the product of checked values fits in 63 bits).
uint64_t RawFramesPixelBytes(const RawFrames& frames);

// duration_us when set; otherwise the last timestamp plus the mean interval between frames, or
// plus one second for a single frame (so one frame is a one-second clip, never an empty one).
int64_t ResolvedDurationUs(const RawFrames& frames);

// The file's header (fixed part and timestamps), its duration resolved. Call after CheckRawFrames.
std::string EncodeRawFramesHeader(const RawFrames& frames);

// Whether `head` starts with the raw-frames magic.
bool HasRawFramesMagic(std::span<const uint8_t> head);

// Reads the fixed part of a header (kRawFramesFixedHeaderBytes): every field but the timestamps,
// which ParseRawFramesTimestamps reads from the frame_count * 8 bytes after it. INVALID_ARGUMENT
// for a short header, a wrong magic or an unknown version. The values are not checked: call
// CheckRawFrames once the timestamps are in.
StatusOr<RawFrames> ParseRawFramesFixedHeader(std::span<const uint8_t> head);
Status ParseRawFramesTimestamps(std::span<const uint8_t> bytes, RawFrames& frames);

// Index of the frame shown at `target_us`: the last whose timestamp is <= target_us (within 1 us,
// as the video decoder compares), or the first when the target precedes every frame (as a
// video's first frame is shown from time 0).
size_t RawFrameAt(const RawFrames& frames, double target_us);

}  // namespace framezip::media
