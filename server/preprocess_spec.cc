#include "server/preprocess_spec.h"

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

}  // namespace framezip::server
