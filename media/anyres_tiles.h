// LLaVA-OneVision's "anyres" tiles of a single still image, as transformers'
// LlavaOnevisionImageProcessor cuts them (docs/models.md §2.1.2):
//   1. canvas = select_best_resolution((height, width), pinpoints)   (common/anyres_canvas.h);
//   2. the image is resized, aspect kept, to fit the canvas: the side that limits the scale fills
//      it, the other is ceil(side · scale) (get_patch_output_size), with the spec's resampler;
//   3. it is centred on the canvas, padding value 0 (black before normalisation) around it, the
//      odd pixel going right and down;
//   4. the canvas is cut into tile x tile squares, row-major, and the whole original image,
//      resized to tile x tile, is put first (the "base tile").
// Every tile is then rescaled and normalised as the spec says. The engine turns the tiles'
// features back into one grid with the same canvas (engine/vision/anyres.h).
#pragma once

#include "common/status.h"
#include "media/image_view.h"
#include "media/media_types.h"

namespace framezip::media {

struct AnyresTiling {
  int tile = 0;  // side of every tile (the spec's height = width)
  int canvas_height = 0, canvas_width = 0;
  int resized_height = 0, resized_width = 0;  // the image on the canvas, before padding
  int tiles_down = 0, tiles_across = 0;

  int num_frames() const { return 1 + tiles_down * tiles_across; }
};

// The tiling of a width x height image under `spec` (whose anyres_pinpoints are not empty and
// which ValidatePreprocessSpec accepted).
AnyresTiling PlanAnyresTiles(const PreprocessSpec& spec, int width, int height);

// Writes tiling.num_frames() frames of 3 x tile x tile floats to `out`: the base tile, then the
// canvas's tiles row-major.
void PreprocessAnyresImage(const ImageView& rgb, const PreprocessSpec& spec,
                           const AnyresTiling& tiling, float* out);

}  // namespace framezip::media
