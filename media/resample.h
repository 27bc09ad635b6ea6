// Antialiased separable resampling of RGB images that reproduces, value for value, what the
// Hugging Face processors compute (docs/models.md §2.1.6); see Resampler in media_types.h for the
// three arithmetics. Bicubic uses a = -0.5 (support 2), bilinear the triangle filter (support 1);
// when downscaling the support grows by the scale factor (antialiasing). Nearest follows each
// library's rule.
#pragma once

#include "media/image_view.h"
#include "media/media_types.h"

namespace framezip::media {

// Resizes `in` to out_width x out_height (both >= 1). Same size returns an exact copy.
RgbImage ResizeRgb(const ImageView& in, int out_width, int out_height, Interpolation interpolation,
                   Resampler resampler);

}  // namespace framezip::media
