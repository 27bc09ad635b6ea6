// A media file as vision-tower input for the CLI's in-process commands (run, eval, bench
// attention): decoded by the media stage, `num_frames` sampled uniformly (1 for an image),
// preprocessed to `spec`, as one [frames, channels, height, width] f32 tensor.
#pragma once

#include <filesystem>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/runtime/engine.h"
#include "media/media.h"

namespace framezip::cli {

StatusOr<engine::Tensor> DecodeVideoFrames(const std::filesystem::path& file, int num_frames,
                                           const media::PreprocessSpec& spec);

// A still image as one visual input, preprocessed to `spec`. When the spec cuts anyres tiles
// (server::ImagePreprocessSpecFor with sole_image), the input carries the image's original size,
// which the engine needs to reassemble the tiles' features.
StatusOr<engine::runtime::VisualInput> DecodeImageInput(const std::filesystem::path& file,
                                                        const media::PreprocessSpec& spec);

}  // namespace framezip::cli
