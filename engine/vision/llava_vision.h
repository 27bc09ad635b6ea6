// The visual token embeddings LLaVA merges into the prompt: what
// LlavaOnevisionModel.get_video_features / get_image_features (+ the newline handling of forward
// and pack_image_features) produce, docs/models.md §1.3-§1.5. The result rows replace, in order,
// the <video> / <image> placeholder tokens of the prompt (the LLM casts them to its dtype).
//
// Supported:
//   - Video (llava_onevision): per frame tower -> projector -> bilinear 2x2 pooling
//     (27x27 -> 14x14, align_corners=False, on projected features) -> frames concatenated
//     frame-major -> ONE image_newline at the end of the video: F·ceil(G/2)² + 1 tokens
//     (196·F + 1 for SigLIP-384/14). llava_next_video's average/max pooling is UNIMPLEMENTED.
//   - Image at base resolution (one 384x384 tile): tower -> projector -> image_newline appended
//     once when the model has one: 729 + 1 = 730 tokens for OV (docs/models.md §1.4 case B, what OV
//     does for images of multi-image samples), 576 for LLaVA-1.5 (CLIP, "default", no newline).
//   - Image with anyres (OV single-image samples, docs/models.md §1.4 case A): base tile features
//     (729, no newline) then the tiles' grid, unpadded to the original aspect ratio, shrunk
//     bilinearly when larger than anyres_max tiles' worth, with a newline ending every row
//     (EncodeImageAnyres; geometry in anyres.h). The tiles themselves come from the processor
//     (media/), which must use the same pinpoints.
// Pixels in and features out are f32 host tensors. The tower and the projector run on the device
// their weights are on (a GPU when the runtime copied them there: VisionTowerWeightsOn,
// ProjectorWeightsOn); pooling, unpadding and newlines run on the CPU. Thread-compatible (no
// shared state).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/model/config.h"
#include "engine/vision/vision_tower.h"
#include "engine/vision/vision_weights.h"

namespace framezip::engine::vision {

// Side of the pooled per-frame grid: ceil(G / 2), G = image_size / patch_size (27 -> 14).
int64_t PooledGridSide(const model::VisionConfig& config);

// Placeholder tokens one video of `num_frames` frames expands to: F·ceil(G/2)² + 1 (OV).
// INVALID_ARGUMENT for num_frames < 1; UNIMPLEMENTED for architectures other than
// llava_onevision.
StatusOr<int64_t> VideoTokenCount(const model::LlavaConfig& config, int64_t num_frames);

// Placeholder tokens one base-resolution image expands to: selected tokens (+1 with an
// image_newline), 730 for OV.
int64_t BaseImageTokenCount(const model::LlavaConfig& config);

// frames [F, C, S, S] f32 (one video, the video processor's output) -> [VideoTokenCount(F), H] f32.
StatusOr<Tensor> EncodeVideo(const model::LlavaConfig& config, const LlavaVisionWeights& weights,
                             const Tensor& frames, const VisionRunOptions& options = {});

// images [N, C, S, S] f32, each one base-resolution tile -> [N · BaseImageTokenCount, H] f32,
// image after image.
StatusOr<Tensor> EncodeImagesBaseResolution(const model::LlavaConfig& config,
                                            const LlavaVisionWeights& weights, const Tensor& images,
                                            const VisionRunOptions& options = {});

// Placeholder tokens of one anyres image of original (height, width): 729 + out_h·(out_w + 1)
// (the processor's expansion, docs/models.md §2.3; e.g. 899x1024 -> 6551).
StatusOr<int64_t> AnyresImageTokenCount(const model::LlavaConfig& config, int64_t height,
                                        int64_t width);

// One image of a single-image sample: tiles [1 + tiles_h·tiles_w, C, S, S] f32 (base tile first,
// then row-major, as the processor emits them) of an original (height, width) image ->
// [AnyresImageTokenCount(height, width), H] f32. INVALID_ARGUMENT when the tile count does not
// match the layout of (height, width); UNIMPLEMENTED for architectures other than
// llava_onevision.
StatusOr<Tensor> EncodeImageAnyres(const model::LlavaConfig& config,
                                   const LlavaVisionWeights& weights, const Tensor& tiles,
                                   int64_t height, int64_t width,
                                   const VisionRunOptions& options = {});

// apply_pooling on its own: projected [F, G·G, H] f32 -> [F, ceil(G/2)², H] f32
// (exposed for tests and for callers that cache projected frame features).
StatusOr<Tensor> PoolVideoFeatures(const model::LlavaConfig& config, const Tensor& projected);

}  // namespace framezip::engine::vision
