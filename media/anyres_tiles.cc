#include "media/anyres_tiles.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <tuple>

#include "common/anyres_canvas.h"
#include "media/preprocess.h"
#include "media/resample.h"

namespace framezip::media {
namespace {

// transformers' get_patch_output_size, in Python floats: the limiting side fills the canvas, the
// other is math.ceil(side * scale), never past the canvas.
std::pair<int, int> FitToCanvas(int height, int width, int canvas_height, int canvas_width) {
  const double scale_w = static_cast<double>(canvas_width) / width;
  const double scale_h = static_cast<double>(canvas_height) / height;
  if (scale_w < scale_h) {
    const auto h = static_cast<int>(std::ceil(height * scale_w));
    return {std::min(h, canvas_height), canvas_width};
  }
  const auto w = static_cast<int>(std::ceil(width * scale_h));
  return {canvas_height, std::min(w, canvas_width)};
}

}  // namespace

AnyresTiling PlanAnyresTiles(const PreprocessSpec& spec, int width, int height) {
  AnyresTiling t;
  t.tile = spec.height;
  const auto [canvas_h, canvas_w] = SelectBestResolution(
      height, width, std::span<const std::pair<int64_t, int64_t>>(spec.anyres_pinpoints));
  t.canvas_height = static_cast<int>(canvas_h);
  t.canvas_width = static_cast<int>(canvas_w);
  std::tie(t.resized_height, t.resized_width) =
      FitToCanvas(height, width, t.canvas_height, t.canvas_width);
  t.tiles_down = t.canvas_height / t.tile;
  t.tiles_across = t.canvas_width / t.tile;
  return t;
}

void PreprocessAnyresImage(const ImageView& rgb, const PreprocessSpec& spec,
                           const AnyresTiling& tiling, float* out) {
  const int tile = tiling.tile;
  const size_t frame = size_t{3} * tile * tile;
  // The base tile: the whole image squashed to tile x tile, as every single-tile image is.
  PreprocessSpec tile_spec = spec;
  tile_spec.anyres_pinpoints.clear();
  tile_spec.pad_to_square = false;
  tile_spec.crop_height = tile_spec.crop_width = 0;
  tile_spec.resize = ResizeMode::kExact;
  tile_spec.height = tile_spec.width = tile;
  PreprocessImage(rgb, tile_spec, tile, tile, out);

  // The canvas in 8 bits, as the processor pads it before rescaling: zeros, the resized image
  // centred (divmod: the odd pixel of padding goes right and down).
  RgbImage resized;
  ImageView fitted = rgb;
  if (tiling.resized_width != rgb.width || tiling.resized_height != rgb.height) {
    resized = ResizeRgb(rgb, tiling.resized_width, tiling.resized_height, spec.interpolation,
                        spec.resampler);
    fitted = resized.View();
  }
  RgbImage canvas;
  canvas.width = tiling.canvas_width;
  canvas.height = tiling.canvas_height;
  canvas.pixels.assign(static_cast<size_t>(canvas.width) * canvas.height * 3, 0);
  const int top = (tiling.canvas_height - tiling.resized_height) / 2;
  const int left = (tiling.canvas_width - tiling.resized_width) / 2;
  for (int y = 0; y < fitted.height; ++y) {
    std::memcpy(&canvas.pixels[(static_cast<size_t>(top + y) * canvas.width + left) * 3],
                fitted.Row(y), static_cast<size_t>(fitted.width) * 3);
  }

  // Each tile is a window of the canvas at the tile size already: only normalised.
  const ImageView whole = canvas.View();
  float* dst = out + frame;
  for (int ty = 0; ty < tiling.tiles_down; ++ty) {
    for (int tx = 0; tx < tiling.tiles_across; ++tx) {
      const ImageView window{whole.Row(ty * tile) + static_cast<size_t>(tx) * tile * 3, tile, tile,
                             whole.stride};
      PreprocessImage(window, tile_spec, tile, tile, dst);
      dst += frame;
    }
  }
}

}  // namespace framezip::media
