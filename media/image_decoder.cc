#include "media/image_decoder.h"

#include <cstring>
#include <mutex>
#include <opencv2/core.hpp>
#include <opencv2/core/utils/logger.hpp>
#include <opencv2/imgcodecs.hpp>

namespace framezip::media::internal {
namespace {

Status CheckSize(int width, int height, const MediaLimits& limits) {
  if (width > limits.max_width || height > limits.max_height) {
    return ResourceExhaustedError("image is {}x{}; the limit is {}x{} (max_width x max_height)",
                                  width, height, limits.max_width, limits.max_height);
  }
  return absl::OkStatus();
}

// imdecode logs a warning to stderr for every undecodable upload; a server's stderr is not the
// place for per-request noise (the status carries the cause). Done once per process; it raises
// OpenCV's global log threshold, which only media/ uses.
void QuietOpenCvLogging() {
  static std::once_flag once;
  std::call_once(once,
                 [] { cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_ERROR); });
}

}  // namespace

const char* ImageFormatName(SniffedType type) {
  switch (type) {
    case SniffedType::kJpeg:
      return "JPEG";
    case SniffedType::kPng:
      return "PNG";
    case SniffedType::kWebp:
      return "WebP";
    case SniffedType::kBmp:
      return "BMP";
    case SniffedType::kGif:
      return "GIF";
    case SniffedType::kUnknown:
    case SniffedType::kMp4:
    case SniffedType::kMatroska:
    case SniffedType::kAvi:
    case SniffedType::kMpegTs:
      break;
  }
  return "image";
}

StatusOr<RgbImage> DecodeStillImage(std::span<const uint8_t> bytes, const SniffResult& sniff,
                                    const MediaLimits& limits) {
  const char* name = ImageFormatName(sniff.type);
  if (sniff.animated) {
    return InvalidArgumentError(
        "animated WebP is not supported: send it as a video (mp4, webm, gif) or a still image");
  }
  if (sniff.width <= 0 || sniff.height <= 0) {
    return InvalidArgumentError("corrupt or truncated {} image: its header has no valid size",
                                name);
  }
  FZ_RETURN_IF_ERROR(CheckSize(sniff.width, sniff.height, limits));

  QuietOpenCvLogging();
  cv::Mat bgr;
  try {
    const cv::Mat encoded(1, static_cast<int>(bytes.size()), CV_8UC1,
                          const_cast<uint8_t*>(bytes.data()));
    bgr = cv::imdecode(encoded, cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {
    return InvalidArgumentError("corrupt or truncated {} image: {}", name, e.what());
  }
  if (bgr.empty() || bgr.type() != CV_8UC3) {
    return InvalidArgumentError("corrupt or truncated {} image: it could not be decoded", name);
  }
  FZ_RETURN_IF_ERROR(CheckSize(bgr.cols, bgr.rows, limits));

  RgbImage out;
  out.width = bgr.cols;
  out.height = bgr.rows;
  out.pixels.resize(static_cast<size_t>(out.width) * out.height * 3);
  for (int y = 0; y < out.height; ++y) {
    const uint8_t* src = bgr.ptr<uint8_t>(y);
    uint8_t* dst = &out.pixels[static_cast<size_t>(y) * out.width * 3];
    for (int x = 0; x < out.width; ++x) {
      dst[x * 3 + 0] = src[x * 3 + 2];
      dst[x * 3 + 1] = src[x * 3 + 1];
      dst[x * 3 + 2] = src[x * 3 + 0];
    }
  }
  return out;
}

}  // namespace framezip::media::internal
