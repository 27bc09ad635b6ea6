// Still images (JPEG, PNG, WebP, BMP) through OpenCV's imdecode. The size is checked from the
// header (sniff.h) before any pixel is decoded. EXIF orientation is applied (imdecode's default),
// so a phone photo comes out upright, as transformers' load_image does for files. Alpha is
// dropped without compositing (PIL's convert("RGB")). Internal to media/.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "media/image_view.h"
#include "media/media_types.h"
#include "media/sniff.h"

namespace framezip::media::internal {

// INVALID_ARGUMENT "corrupt or truncated PNG image", "animated WebP is not supported";
// RESOURCE_EXHAUSTED for an image over max_width x max_height.
StatusOr<RgbImage> DecodeStillImage(std::span<const uint8_t> bytes, const SniffResult& sniff,
                                    const MediaLimits& limits);

const char* ImageFormatName(SniffedType type);

}  // namespace framezip::media::internal
