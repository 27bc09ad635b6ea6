// transformers' select_best_resolution, the first step of LLaVA-OneVision's "anyres" image path:
// the canvas an image is fitted into before it is cut into tiles. Pure arithmetic, shared by the
// media stage (which cuts the tiles) and the engine (which counts their tokens and reassembles
// their features), so the two can never choose different canvases for one image.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

namespace framezip {

// The (height, width) pinpoint that keeps the most of an image's original pixels when the image
// is scaled, aspect kept, to fit inside it; ties go to the least wasted canvas area, then to the
// earlier pinpoint. {0, 0} when `pinpoints` is empty; height and width must be positive.
std::pair<int64_t, int64_t> SelectBestResolution(
    int64_t height, int64_t width, std::span<const std::pair<int64_t, int64_t>> pinpoints);

}  // namespace framezip
