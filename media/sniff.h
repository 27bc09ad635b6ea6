// Recognizes media by its first bytes, without decoding: the upload path uses it to reject a
// non-media upload early and to choose a MIME type; DecodeMedia uses it to send still images to
// OpenCV and everything else to FFmpeg. For still images it also reads the size from the header,
// so resolution limits are enforced before a pixel is decoded.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace framezip::media {

enum class SniffedType {
  kUnknown,  // not recognized here; FFmpeg's prober may still know it
  kJpeg,
  kPng,
  kWebp,  // still WebP (animated WebP is not supported: FFmpeg 5.1 has no decoder for it)
  kBmp,
  kGif,       // decoded by FFmpeg (animated)
  kMp4,       // ISO BMFF / QuickTime ("ftyp", "moov", ...)
  kMatroska,  // mkv and webm (EBML)
  kAvi,
  kMpegTs,
};

struct SniffResult {
  SniffedType type = SniffedType::kUnknown;
  std::string mime_type;        // empty when unknown
  bool is_still_image = false;  // JPEG, PNG, WebP, BMP: decoded by OpenCV
  // From the image header when is_still_image (0 when the header is too short to tell).
  int width = 0;
  int height = 0;
  bool animated = false;  // WebP with an ANIM chunk
};

// Looks at up to the first 64 KiB. Never reads past `bytes`.
SniffResult SniffMedia(std::span<const uint8_t> bytes);

}  // namespace framezip::media
