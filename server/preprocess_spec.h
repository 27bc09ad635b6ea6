// The media stage's preprocessing spec for a model: the engine's preprocessor_config.json (size,
// rescale, mean/std, resample) turned into media::PreprocessSpec. Lives in server/ because it is
// the one module that may see both engine and media (docs/architecture.md §2); the CLI uses it
// too.
#pragma once

#include <cstdint>

#include "engine/model/config.h"
#include "media/media.h"

namespace framezip::server {

// `image_size` (the vision tower's) is used when the preprocessor config gives no size.
media::PreprocessSpec PreprocessSpecFor(const engine::model::PreprocessorConfig& pre,
                                        int64_t image_size);

// The spec of a still image, as transformers' LlavaOnevisionImageProcessor prepares it: an image
// that is the only one of its turn (`sole_image`) is cut into anyres tiles (base tile first; the
// engine needs its original size to reassemble them); each image of a turn with several is padded
// to a square of the mean colour and sent as one tile. Other architectures take one tile as
// PreprocessSpecFor does.
media::PreprocessSpec ImagePreprocessSpecFor(const engine::model::PreprocessorConfig& pre,
                                             const engine::model::LlavaConfig& config,
                                             bool sole_image);

// The most frames an image can give under `spec` (1 + the largest canvas's tiles; 1 without
// anyres): what a cap on frames per request must let through for an image.
int MaxAnyresFrames(const media::PreprocessSpec& spec);

}  // namespace framezip::server
