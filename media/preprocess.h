// Turns one decoded RGB frame into model input per a PreprocessSpec: pad to square (optional),
// resize, center crop (optional), then (u8 * rescale_factor - mean) / std as float32 CHW.
// The geometry follows transformers' image processors (get_resize_output_image_size with
// default_to_square=False for shortest-edge, floor-centred crops), the arithmetic resample.h.
#pragma once

#include <utility>

#include "common/status.h"
#include "media/image_view.h"
#include "media/media_types.h"

namespace framezip::media {

// INVALID_ARGUMENT naming the field for sizes < 1 or > 16384, std == 0, non-finite values.
Status ValidatePreprocessSpec(const PreprocessSpec& spec);

// The output height and width for a source of width x height (after any rotation).
std::pair<int, int> PreprocessedSize(const PreprocessSpec& spec, int width, int height);

// Writes 3 * out_height * out_width floats to `out`, channel-first. When the source's natural
// output size (PreprocessedSize) differs from out_height x out_width (a stream that changes
// resolution mid-way), the resize step squashes to the batch's size so every frame matches.
void PreprocessImage(const ImageView& rgb, const PreprocessSpec& spec, int out_height,
                     int out_width, float* out);

}  // namespace framezip::media
