// Geometry of LLaVA-OneVision's "anyres" image path (single-image samples), as transformers'
// select_best_resolution / get_anyres_image_grid_shape / unpad_image / pack_image_features
// compute it, docs/models.md §1.4 and §2.1.2. Pure arithmetic: no tensors.
//
// For an original image of (height, width):
//   1. canvas = select_best_resolution((height, width), image_grid_pinpoints)  (pinpoints (h, w))
//   2. tiles = canvas / image_size per side; the processor sends 1 + tiles_h·tiles_w tiles
//      (base tile first, then row-major);
//   3. the tiles' G×G feature grids form a (tiles_h·G) × (tiles_w·G) grid, unpadded with the
//      original aspect ratio (int(round(x, 7)), (grid - n) // 2 removed on each side);
//   4. if ratio = sqrt(h·w / (anyres_max · G²)) > 1.1 the grid is shrunk bilinearly to
//      (int(h // ratio), int(w // ratio)) (Python float floor division);
//   5. tokens = G² (base tile, no newline) + out_h · (out_w + 1) (a newline ends every row).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/model/config.h"

namespace framezip::engine::vision {

// transformers' select_best_resolution: the (height, width) pinpoint that keeps the most
// original pixels when the image is fitted into it, ties going to the least wasted area, then to
// the earlier pinpoint. INVALID_ARGUMENT for a non-positive size or an empty list.
StatusOr<std::pair<int64_t, int64_t>> SelectBestResolution(
    int64_t height, int64_t width, const std::vector<std::pair<int64_t, int64_t>>& pinpoints);

struct AnyresLayout {
  int64_t canvas_h = 0, canvas_w = 0;  // chosen pinpoint (pixels)
  int64_t tiles_h = 0, tiles_w = 0;    // canvas / image_size
  int64_t grid_h = 0, grid_w = 0;      // tiles · G (feature positions)
  int64_t row0 = 0, row1 = 0;          // unpadded window: rows [row0, row1)
  int64_t col0 = 0, col1 = 0;          //                  cols [col0, col1)
  bool shrink = false;                 // ratio > 1.1: bilinear shrink after unpadding
  int64_t out_h = 0, out_w = 0;        // final grid (= unpadded size when !shrink)
  int64_t base_tokens = 0;             // G² (the base tile)

  int64_t num_tiles() const { return 1 + tiles_h * tiles_w; }
  int64_t num_tokens() const { return base_tokens + out_h * (out_w + 1); }
};

// The layout for an image of (height, width) original pixels. INVALID_ARGUMENT when the size is
// not positive, the config has no pinpoints, or a pinpoint is not a multiple of image_size.
StatusOr<AnyresLayout> ComputeAnyresLayout(const model::LlavaConfig& config, int64_t height,
                                           int64_t width);

// Python's int(round(x, 7)) and float floor division a // b, bit-exact (exposed for tests).
int64_t PyIntRound7(double x);
double PyFloorDiv(double a, double b);

}  // namespace framezip::engine::vision
