#include "common/anyres_canvas.h"

#include <algorithm>
#include <cmath>

namespace framezip {

std::pair<int64_t, int64_t> SelectBestResolution(
    int64_t height, int64_t width, std::span<const std::pair<int64_t, int64_t>> pinpoints) {
  std::pair<int64_t, int64_t> best{0, 0};
  int64_t best_effective = 0;
  double best_waste = INFINITY;
  for (auto [h, w] : pinpoints) {
    // Python floats and int() truncation, as transformers computes them.
    const double scale = std::min(static_cast<double>(w) / width, static_cast<double>(h) / height);
    const auto downscaled_w = static_cast<int64_t>(width * scale);
    const auto downscaled_h = static_cast<int64_t>(height * scale);
    const int64_t effective = std::min(downscaled_w * downscaled_h, width * height);
    const double waste = static_cast<double>(h * w - effective);
    if (effective > best_effective || (effective == best_effective && waste < best_waste)) {
      best_effective = effective;
      best_waste = waste;
      best = {h, w};
    }
  }
  return best;
}

}  // namespace framezip
