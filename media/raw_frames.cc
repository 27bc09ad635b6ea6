#include "media/raw_frames.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace framezip::media {
namespace {

constexpr char kMagic[8] = {'F', 'Z', 'R', 'G', 'B', '2', '4', '\0'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kMaxStrideBytes = int64_t{1} << 31;

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutI64(std::string& out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
int64_t GetI64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

}  // namespace

Status CheckRawFrames(const RawFrames& f, const RawFrameLimits& limits, std::string_view field) {
  const std::string prefix(field);
  if (f.width < 1 || f.width > limits.max_width) {
    return InvalidArgumentError("{}.width: {} is not in [1, {}] (the frame-size limit)", prefix,
                                f.width, limits.max_width);
  }
  if (f.height < 1 || f.height > limits.max_height) {
    return InvalidArgumentError("{}.height: {} is not in [1, {}] (the frame-size limit)", prefix,
                                f.height, limits.max_height);
  }
  if (f.stride_bytes < 3 * f.width || f.stride_bytes > kMaxStrideBytes) {
    return InvalidArgumentError(
        "{}.stride_bytes: {} is not in [3 * width = {}, {}] (a row holds width RGB pixels, then "
        "any padding)",
        prefix, f.stride_bytes, 3 * f.width, kMaxStrideBytes);
  }
  if (f.frame_count < 1 || f.frame_count > limits.max_frames) {
    return InvalidArgumentError("{}.frame_count: {} is not in [1, {}]", prefix, f.frame_count,
                                limits.max_frames);
  }
  if (static_cast<int64_t>(f.timestamps_us.size()) != f.frame_count) {
    return InvalidArgumentError("{}.timestamps_us: {} timestamps for {} frames (one per frame)",
                                prefix, f.timestamps_us.size(), f.frame_count);
  }
  const double max_us = limits.max_duration_s * 1e6;
  for (size_t i = 0; i < f.timestamps_us.size(); ++i) {
    const int64_t t = f.timestamps_us[i];
    if (t < 0) {
      return InvalidArgumentError("{}.timestamps_us[{}]: {} is negative", prefix, i, t);
    }
    if (i > 0 && t <= f.timestamps_us[i - 1]) {
      return InvalidArgumentError(
          "{}.timestamps_us[{}]: {} is not after the previous frame's {} (timestamps must "
          "increase)",
          prefix, i, t, f.timestamps_us[i - 1]);
    }
    if (static_cast<double>(t) > max_us) {
      return InvalidArgumentError(
          "{}.timestamps_us[{}]: {} us is past the video-duration limit of {} s", prefix, i, t,
          limits.max_duration_s);
    }
  }
  if (f.duration_us < 0) {
    return InvalidArgumentError("{}.duration_us: {} is negative", prefix, f.duration_us);
  }
  if (f.duration_us > 0 && f.duration_us <= f.timestamps_us.back()) {
    return InvalidArgumentError(
        "{}.duration_us: {} is not after the last frame's timestamp {} (0 derives it)", prefix,
        f.duration_us, f.timestamps_us.back());
  }
  const int64_t duration = ResolvedDurationUs(f);
  if (static_cast<double>(duration) > max_us) {
    return InvalidArgumentError(
        "{}.duration_us: the clip lasts {} us, over the video-duration limit of {} s", prefix,
        duration, limits.max_duration_s);
  }
  return absl::OkStatus();
}

uint64_t RawFramesPixelBytes(const RawFrames& f) {
  return static_cast<uint64_t>(f.stride_bytes) * static_cast<uint64_t>(f.height) *
         static_cast<uint64_t>(f.frame_count);
}

int64_t ResolvedDurationUs(const RawFrames& f) {
  if (f.duration_us > 0 || f.timestamps_us.empty()) return f.duration_us;
  const int64_t last = f.timestamps_us.back();
  if (f.timestamps_us.size() == 1) return last + 1'000'000;
  const int64_t span = last - f.timestamps_us.front();
  return last + span / static_cast<int64_t>(f.timestamps_us.size() - 1);
}

std::string EncodeRawFramesHeader(const RawFrames& f) {
  std::string out(kMagic, sizeof(kMagic));
  out.reserve(kRawFramesFixedHeaderBytes + 8 * f.timestamps_us.size());
  PutU32(out, kVersion);
  PutU32(out, static_cast<uint32_t>(f.width));
  PutU32(out, static_cast<uint32_t>(f.height));
  PutU32(out, static_cast<uint32_t>(f.stride_bytes));
  PutU32(out, static_cast<uint32_t>(f.frame_count));
  PutU32(out, 0);
  PutI64(out, ResolvedDurationUs(f));
  for (int64_t t : f.timestamps_us) PutI64(out, t);
  return out;
}

bool HasRawFramesMagic(std::span<const uint8_t> head) {
  return head.size() >= sizeof(kMagic) && std::memcmp(head.data(), kMagic, sizeof(kMagic)) == 0;
}

StatusOr<RawFrames> ParseRawFramesFixedHeader(std::span<const uint8_t> head) {
  if (head.size() < kRawFramesFixedHeaderBytes || !HasRawFramesMagic(head)) {
    return InvalidArgumentError("raw frames: the header is truncated or not a raw-frames header");
  }
  const uint8_t* p = head.data();
  const uint32_t version = GetU32(p + 8);
  if (version != kVersion) {
    return InvalidArgumentError("raw frames: header version {} is not the supported {}", version,
                                kVersion);
  }
  RawFrames f;
  f.width = GetU32(p + 12);
  f.height = GetU32(p + 16);
  f.stride_bytes = GetU32(p + 20);
  f.frame_count = GetU32(p + 24);
  f.duration_us = GetI64(p + 32);
  return f;
}

Status ParseRawFramesTimestamps(std::span<const uint8_t> bytes, RawFrames& f) {
  if (f.frame_count < 0 || bytes.size() != static_cast<size_t>(f.frame_count) * 8) {
    return InvalidArgumentError("raw frames: the header's timestamps are truncated");
  }
  f.timestamps_us.resize(static_cast<size_t>(f.frame_count));
  for (size_t i = 0; i < f.timestamps_us.size(); ++i) f.timestamps_us[i] = GetI64(&bytes[8 * i]);
  return absl::OkStatus();
}

size_t RawFrameAt(const RawFrames& f, double target_us) {
  // The first timestamp past the target; the frame before it is the one shown. The 1 us of slack
  // is the video decoder's, so a target computed in floating point just short of a frame's time
  // picks that frame in both.
  const auto it =
      std::upper_bound(f.timestamps_us.begin(), f.timestamps_us.end(), target_us + 1.0,
                       [](double t, int64_t ts) { return t < static_cast<double>(ts); });
  if (it == f.timestamps_us.begin()) return 0;
  return static_cast<size_t>(it - f.timestamps_us.begin() - 1);
}

}  // namespace framezip::media
