#include "engine/vision/anyres.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <tuple>

#include "common/anyres_canvas.h"

namespace framezip::engine::vision {

int64_t PyIntRound7(double x) {
  // CPython rounds the exact binary value to 7 decimals (correctly rounded, half-even on exact
  // ties); glibc's printf does the same conversion. int() then truncates toward zero.
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.7f", x);
  return static_cast<int64_t>(std::strtod(buf, nullptr));
}

double PyFloorDiv(double a, double b) {
  // CPython's float_divmod (Objects/floatobject.c), floor-division part.
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0) {
    if ((b < 0) != (mod < 0)) div -= 1.0;
  }
  if (div != 0.0) {
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return floordiv;
  }
  return std::copysign(0.0, a / b);
}

StatusOr<std::pair<int64_t, int64_t>> SelectBestResolution(
    int64_t height, int64_t width, const std::vector<std::pair<int64_t, int64_t>>& pinpoints) {
  if (height <= 0 || width <= 0) {
    return InvalidArgumentError("anyres: image size {}x{} must be positive", height, width);
  }
  if (pinpoints.empty()) return InvalidArgumentError("anyres: image_grid_pinpoints is empty");
  // One implementation of transformers' select_best_resolution (common/anyres_canvas.h), shared
  // with the chat template's token counting and the media stage's tiling, so placeholder counts,
  // tiles and feature layouts can never disagree.
  return framezip::SelectBestResolution(height, width, pinpoints);
}

StatusOr<AnyresLayout> ComputeAnyresLayout(const model::LlavaConfig& config, int64_t height,
                                           int64_t width) {
  const int64_t S = config.vision.image_size, G = config.vision.patches_per_side();
  if (config.anyres_max_tiles <= 0) {
    return InvalidArgumentError("config.json: vision_aspect_ratio '{}' gives no anyres_max tiles",
                                config.vision_aspect_ratio);
  }
  FZ_ASSIGN_OR_RETURN(auto canvas,
                      SelectBestResolution(height, width, config.image_grid_pinpoints));
  AnyresLayout a;
  std::tie(a.canvas_h, a.canvas_w) = canvas;
  if (a.canvas_h % S != 0 || a.canvas_w % S != 0) {
    return InvalidArgumentError(
        "config.json: image_grid_pinpoints entry [{}, {}] is not a multiple of image_size {}",
        a.canvas_h, a.canvas_w, S);
  }
  a.tiles_h = a.canvas_h / S;
  a.tiles_w = a.canvas_w / S;
  a.grid_h = a.tiles_h * G;
  a.grid_w = a.tiles_w * G;
  a.base_tokens = G * G;
  // unpad_image: compare aspect ratios as Python floats.
  const double original_aspect = static_cast<double>(width) / static_cast<double>(height);
  const double current_aspect = static_cast<double>(a.grid_w) / static_cast<double>(a.grid_h);
  a.row0 = 0, a.row1 = a.grid_h, a.col0 = 0, a.col1 = a.grid_w;
  if (original_aspect > current_aspect) {
    const double scale = static_cast<double>(a.grid_w) / static_cast<double>(width);
    const int64_t new_h = PyIntRound7(static_cast<double>(height) * scale);
    const int64_t pad = (a.grid_h - new_h) / 2;  // new_h <= grid_h, so this is floor division
    a.row0 = pad;
    a.row1 = a.grid_h - pad;
  } else {
    const double scale = static_cast<double>(a.grid_h) / static_cast<double>(height);
    const int64_t new_w = PyIntRound7(static_cast<double>(width) * scale);
    const int64_t pad = (a.grid_w - new_w) / 2;
    a.col0 = pad;
    a.col1 = a.grid_w - pad;
  }
  const int64_t h = a.row1 - a.row0, w = a.col1 - a.col0;
  if (h <= 0 || w <= 0) {
    // The input's fault (an extreme aspect ratio), not ours: the caller can pad the image.
    return InvalidArgumentError(
        "anyres: an image of {}x{} (height x width) keeps no feature row or column after unpadding "
        "its {}x{} grid; pad it to a less extreme aspect ratio",
        height, width, a.grid_h, a.grid_w);
  }
  const double ratio =
      std::sqrt(static_cast<double>(h * w) / static_cast<double>(config.anyres_max_tiles * G * G));
  a.shrink = ratio > 1.1;
  a.out_h = a.shrink ? static_cast<int64_t>(PyFloorDiv(static_cast<double>(h), ratio)) : h;
  a.out_w = a.shrink ? static_cast<int64_t>(PyFloorDiv(static_cast<double>(w), ratio)) : w;
  return a;
}

}  // namespace framezip::engine::vision
