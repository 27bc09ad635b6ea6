#include "engine/vision/llava_vision.h"

#include <algorithm>
#include <cstring>

#include "engine/ops/bilinear_resize.h"
#include "engine/vision/anyres.h"
#include "engine/vision/projector.h"
#include "engine/vision/tensor_util.h"

namespace framezip::engine::vision {
namespace {

Status CheckOnevision(const model::LlavaConfig& config, const char* what) {
  if (config.arch != model::LlavaArch::kLlavaOnevision) {
    return UnimplementedError("{}: only llava_onevision's layout is implemented, not {}", what,
                              config.model_type);
  }
  return absl::OkStatus();
}

// Copies image_newline [H] (any float dtype) as f32 into dst.
void WriteNewline(const Tensor& newline, float* dst) {
  for (int64_t i = 0; i < newline.numel(); ++i) dst[i] = LoadAsF32(newline, i);
}

}  // namespace

int64_t PooledGridSide(const model::VisionConfig& config) {
  return ops::HalfSizeCeil(config.patches_per_side());
}

StatusOr<int64_t> VideoTokenCount(const model::LlavaConfig& config, int64_t num_frames) {
  FZ_RETURN_IF_ERROR(CheckOnevision(config, "VideoTokenCount"));
  if (num_frames < 1) return InvalidArgumentError("video: {} frames, need at least 1", num_frames);
  const int64_t side = PooledGridSide(config.vision);
  return num_frames * side * side + (config.has_image_newline ? 1 : 0);
}

int64_t BaseImageTokenCount(const model::LlavaConfig& config) {
  return SelectedTokensPerImage(config) + (config.has_image_newline ? 1 : 0);
}

StatusOr<Tensor> PoolVideoFeatures(const model::LlavaConfig& config, const Tensor& projected) {
  const int64_t G = config.vision.patches_per_side(), H = config.text.hidden_size;
  if (projected.rank() != 3 || projected.dim(1) != G * G || projected.dim(2) != H) {
    // The reference views the tokens as [G, G]; "default" selection (G·G - 1 tokens) fails there.
    return InvalidArgumentError(
        "video pooling: projected features {} must be [frames, {}, {}] ({}x{} grid; "
        "vision_feature_select_strategy must keep every patch token)",
        ShapeString(projected.shape()), G * G, H, G, G);
  }
  const int64_t F = projected.dim(0), side = PooledGridSide(config.vision);
  // [F, G·G, H] is already channels-last [F, G, G, H]: no permute needed.
  FZ_ASSIGN_OR_RETURN(Tensor in, projected.Reshape({F, G, G, H}));
  FZ_ASSIGN_OR_RETURN(Tensor out, NewF32({F, side, side, H}, "pooled video features"));
  FZ_RETURN_IF_ERROR(ops::BilinearResize(in, out, ops::ImageLayout::kChannelsLast));
  return out.Reshape({F, side * side, H});
}

StatusOr<Tensor> EncodeVideo(const model::LlavaConfig& config, const LlavaVisionWeights& weights,
                             const Tensor& frames, const VisionRunOptions& options) {
  FZ_RETURN_IF_ERROR(CheckOnevision(config, "EncodeVideo"));
  if (frames.rank() != 4) {
    return InvalidArgumentError("video: pixel_values_videos has shape {}, expected [F, C, S, S]",
                                ShapeString(frames.shape()));
  }
  const int64_t F = frames.dim(0), H = config.text.hidden_size;
  FZ_ASSIGN_OR_RETURN(const int64_t tokens, VideoTokenCount(config, F));
  const int64_t per_frame = PooledGridSide(config.vision) * PooledGridSide(config.vision);
  FZ_ASSIGN_OR_RETURN(Tensor out, NewF32({tokens, H}, "video features"));
  // Tower -> projector -> pooling one batch of frames at a time, so only one batch's unpooled
  // features (729 tokens per frame) are alive at once.
  const int64_t chunk = std::max<int64_t>(1, options.max_images_per_batch);
  for (int64_t first = 0; first < F; first += chunk) {
    const int64_t B = std::min(chunk, F - first);
    FZ_ASSIGN_OR_RETURN(Tensor pixels, frames.Slice(first, first + B));
    FZ_ASSIGN_OR_RETURN(Tensor features,
                        VisionTowerFeatures(config, weights.tower, pixels, options));
    FZ_ASSIGN_OR_RETURN(Tensor projected, Project(config, weights.projector, features));
    FZ_ASSIGN_OR_RETURN(Tensor pooled, PoolVideoFeatures(config, projected));
    std::memcpy(out.data<float>() + first * per_frame * H, pooled.data<float>(), pooled.nbytes());
  }
  if (config.has_image_newline) {
    WriteNewline(weights.image_newline, out.data<float>() + F * per_frame * H);
  }
  return out;
}

StatusOr<Tensor> EncodeImagesBaseResolution(const model::LlavaConfig& config,
                                            const LlavaVisionWeights& weights, const Tensor& images,
                                            const VisionRunOptions& options) {
  if (images.rank() != 4) {
    return InvalidArgumentError("image: pixel_values has shape {}, expected [N, C, S, S]",
                                ShapeString(images.shape()));
  }
  const int64_t N = images.dim(0), H = config.text.hidden_size;
  const int64_t T = SelectedTokensPerImage(config), per_image = BaseImageTokenCount(config);
  FZ_ASSIGN_OR_RETURN(Tensor out, NewF32({N * per_image, H}, "image features"));
  const int64_t chunk = std::max<int64_t>(1, options.max_images_per_batch);
  for (int64_t first = 0; first < N; first += chunk) {
    const int64_t B = std::min(chunk, N - first);
    FZ_ASSIGN_OR_RETURN(Tensor pixels, images.Slice(first, first + B));
    FZ_ASSIGN_OR_RETURN(Tensor features,
                        VisionTowerFeatures(config, weights.tower, pixels, options));
    FZ_ASSIGN_OR_RETURN(Tensor projected, Project(config, weights.projector, features));
    for (int64_t b = 0; b < B; ++b) {
      float* dst = out.data<float>() + (first + b) * per_image * H;
      std::memcpy(dst, projected.data<float>() + b * T * H, static_cast<size_t>(T * H) * 4);
      if (config.has_image_newline) WriteNewline(weights.image_newline, dst + T * H);
    }
  }
  return out;
}

StatusOr<int64_t> AnyresImageTokenCount(const model::LlavaConfig& config, int64_t height,
                                        int64_t width) {
  FZ_RETURN_IF_ERROR(CheckOnevision(config, "AnyresImageTokenCount"));
  FZ_ASSIGN_OR_RETURN(const AnyresLayout layout, ComputeAnyresLayout(config, height, width));
  return layout.num_tokens();
}

StatusOr<Tensor> EncodeImageAnyres(const model::LlavaConfig& config,
                                   const LlavaVisionWeights& weights, const Tensor& tiles,
                                   int64_t height, int64_t width, const VisionRunOptions& options) {
  FZ_RETURN_IF_ERROR(CheckOnevision(config, "EncodeImageAnyres"));
  if (!config.has_image_newline || !weights.image_newline.defined()) {
    return InvalidArgumentError("anyres image: the model has no image_newline");
  }
  FZ_ASSIGN_OR_RETURN(const AnyresLayout a, ComputeAnyresLayout(config, height, width));
  if (tiles.rank() != 4 || tiles.dim(0) != a.num_tiles()) {
    return InvalidArgumentError(
        "anyres image: pixel_values has shape {}, but a {}x{} image on a {}x{} canvas needs "
        "[{}, C, S, S] (base tile + {}x{} tiles)",
        ShapeString(tiles.shape()), height, width, a.canvas_h, a.canvas_w, a.num_tiles(), a.tiles_h,
        a.tiles_w);
  }
  const int64_t G = config.vision.patches_per_side(), H = config.text.hidden_size;
  if (SelectedTokensPerImage(config) != G * G) {
    return InvalidArgumentError(
        "anyres image: {} tokens per tile cannot form a {}x{} grid (select strategy must be full)",
        SelectedTokensPerImage(config), G, G);
  }
  // Tower + projector over every tile, in batches.
  FZ_ASSIGN_OR_RETURN(Tensor projected, NewF32({a.num_tiles(), G * G, H}, "anyres tile features"));
  const int64_t chunk = std::max<int64_t>(1, options.max_images_per_batch);
  for (int64_t first = 0; first < a.num_tiles(); first += chunk) {
    const int64_t B = std::min(chunk, a.num_tiles() - first);
    FZ_ASSIGN_OR_RETURN(Tensor pixels, tiles.Slice(first, first + B));
    FZ_ASSIGN_OR_RETURN(Tensor features,
                        VisionTowerFeatures(config, weights.tower, pixels, options));
    FZ_ASSIGN_OR_RETURN(Tensor p, Project(config, weights.projector, features));
    std::memcpy(projected.data<float>() + first * G * G * H, p.data<float>(), p.nbytes());
  }
  // The unpadded window of the tile grid, channels-last [h, w, H]: grid row = tile_row·G + r,
  // grid col = tile_col·G + c, tile = 1 + tile_row·tiles_w + tile_col, token = r·G + c.
  const int64_t h = a.row1 - a.row0, w = a.col1 - a.col0;
  FZ_ASSIGN_OR_RETURN(Tensor grid, NewF32({1, h, w, H}, "anyres grid"));
  const float* src = projected.data<float>();
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      const int64_t gy = a.row0 + y, gx = a.col0 + x;
      const int64_t tile = 1 + (gy / G) * a.tiles_w + gx / G;
      const int64_t token = (gy % G) * G + gx % G;
      std::memcpy(grid.data<float>() + (y * w + x) * H, src + (tile * G * G + token) * H,
                  static_cast<size_t>(H) * sizeof(float));
    }
  }
  if (a.shrink) {
    FZ_ASSIGN_OR_RETURN(Tensor shrunk, NewF32({1, a.out_h, a.out_w, H}, "anyres shrunk grid"));
    FZ_RETURN_IF_ERROR(ops::BilinearResize(grid, shrunk, ops::ImageLayout::kChannelsLast));
    grid = shrunk;
  }
  // Output: base tile (no newline), then each row of the grid followed by image_newline.
  FZ_ASSIGN_OR_RETURN(Tensor out, NewF32({a.num_tokens(), H}, "anyres image features"));
  float* dst = out.data<float>();
  std::memcpy(dst, src, static_cast<size_t>(G * G * H) * sizeof(float));
  dst += G * G * H;
  for (int64_t y = 0; y < a.out_h; ++y) {
    std::memcpy(dst, grid.data<float>() + y * a.out_w * H,
                static_cast<size_t>(a.out_w * H) * sizeof(float));
    dst += a.out_w * H;
    WriteNewline(weights.image_newline, dst);
    dst += H;
  }
  return out;
}

}  // namespace framezip::engine::vision
