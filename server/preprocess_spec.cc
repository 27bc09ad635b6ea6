#include "server/preprocess_spec.h"

#include <algorithm>

namespace framezip::server {

media::PreprocessSpec PreprocessSpecFor(const engine::model::PreprocessorConfig& pre,
                                        int64_t image_size) {
  media::PreprocessSpec spec;
  spec.resize = media::ResizeMode::kExact;
  spec.height = static_cast<int>(pre.size_height > 0 ? pre.size_height : image_size);
  spec.width = static_cast<int>(pre.size_width > 0 ? pre.size_width : image_size);
  spec.rescale_factor = pre.do_rescale ? pre.rescale_factor : 1.0;
  for (int c = 0; c < 3; ++c) {
    spec.mean[c] = pre.do_normalize && pre.image_mean.size() == 3 ? float(pre.image_mean[c]) : 0.f;
    spec.std[c] = pre.do_normalize && pre.image_std.size() == 3 ? float(pre.image_std[c]) : 1.f;
  }
  // PIL's resample codes: 2 = bilinear, 3 = bicubic (LLaVA-OneVision's).
  spec.interpolation =
      pre.resample == 2 ? media::Interpolation::kBilinear : media::Interpolation::kBicubic;
  return spec;
}

int MaxAnyresFrames(const media::PreprocessSpec& spec) {
  int64_t most = 0;
  for (const auto& [h, w] : spec.anyres_pinpoints) {
    most = std::max(most, (h / spec.height) * (w / spec.height));
  }
  return static_cast<int>(1 + most);
}

media::PreprocessSpec ImagePreprocessSpecFor(const engine::model::PreprocessorConfig& pre,
                                             const engine::model::LlavaConfig& config,
                                             bool sole_image) {
  media::PreprocessSpec spec = PreprocessSpecFor(pre, config.vision.image_size);
  if (config.arch != engine::model::LlavaArch::kLlavaOnevision) return spec;
  if (sole_image) {
    // The processor's own pinpoints first, as the chat template counts tokens with them.
    spec.anyres_pinpoints =
        !pre.image_grid_pinpoints.empty() ? pre.image_grid_pinpoints : config.image_grid_pinpoints;
    return spec;
  }
  // pad_to_square's background: tuple(int(x * 255) for x in image_mean).
  spec.pad_to_square = true;
  for (int c = 0; c < 3; ++c)
    spec.pad_rgb[c] =
        static_cast<uint8_t>(255.0 * (pre.image_mean.size() == 3 ? pre.image_mean[c] : 0.0));
  return spec;
}

}  // namespace framezip::server
