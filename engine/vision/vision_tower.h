// The ViT vision tower of LLaVA models: SigLIP (LLaVA-OneVision) or CLIP (LLaVA-1.5 / NeXT),
// as transformers' SiglipVisionModel / CLIPVisionModel run it inside LLaVA (docs/models.md §3).
//
//   SigLIP: x = conv_patch(pixels) + pos                       (no class token, conv has a bias)
//   CLIP:   x = pre_layrnorm([cls; conv_patch(pixels)] + pos)  (class token first, no conv bias)
//   then L pre-LN blocks: x += out_proj(MHA(LN1(x))); x += fc2(act(fc1(LN2(x))))
//   (bidirectional attention with q/k/v/out biases, scale head_dim^-0.5; act = gelu_pytorch_tanh
//   for SigLIP, quick_gelu for CLIP, as config.vision.hidden_act says).
//
// hidden_states[0] is the embeddings output (after CLIP's pre_layrnorm), hidden_states[k] the
// output of block k-1. The features LLaVA reads are hidden_states[vision_feature_layer] WITHOUT
// post_layernorm (docs/models.md §3.1: transformers keeps hidden_states[-1] pre-post-LN); a list of
// layers is concatenated on the feature axis in list order; select strategy "default" then drops
// token 0 (CLS), "full" keeps every token.
//
// The conv (kernel = stride = patch) is a GEMM over unfolded patches; pixels beyond the last whole
// patch are ignored (384 = 27·14 + 6). Pixels are rounded to the conv weight's dtype first, as the
// reference casts pixel_values to it. Activations are f32 throughout; weights are read in their
// stored dtype by ops::Linear.
//
// Device: the tower runs where its weights are (VisionTowerWeightsOn copies them to a GPU). Pixels
// and results stay on the host: the pixels are sent as they are and unfolded on the device
// (ops::UnfoldPatches), every layer runs there, and the hidden states asked for are copied back.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/model/config.h"
#include "engine/vision/vision_weights.h"

namespace framezip::engine::vision {

struct VisionRunOptions {
  // Images (frames, tiles) encoded together; bounds the activation memory to about
  // batch · tokens · (4·D + I) · 4 bytes (~130 MB at 8 frames of SigLIP-so400m).
  int64_t max_images_per_batch = 8;
};

// hidden_states entries for the resolved indices `layers` (each in [0, weights.layers.size()]),
// in the order given. pixels [N, C, S, S] f32 with S = config.image_size; each result is
// [N, positions, D] f32. INVALID_ARGUMENT naming the mismatch for a wrong pixel shape/dtype or an
// index past the bound layers.
StatusOr<std::vector<Tensor>> VisionTowerHiddenStates(const model::VisionConfig& config,
                                                      const VisionTowerWeights& weights,
                                                      const Tensor& pixels,
                                                      const std::vector<int64_t>& layers,
                                                      const VisionRunOptions& options = {});

// The features LLaVA projects: pixels [N, C, S, S] f32 -> [N, T, D·nL] f32, T = positions
// (- 1 for "default"), nL = number of configured feature layers.
StatusOr<Tensor> VisionTowerFeatures(const model::LlavaConfig& config,
                                     const VisionTowerWeights& weights, const Tensor& pixels,
                                     const VisionRunOptions& options = {});

// The tower's weights copied to `device` (in their dtype), for running the tower there.
// RESOURCE_EXHAUSTED when the device memory runs out; UNIMPLEMENTED / UNAVAILABLE for a GPU
// without CUDA / without a GPU.
StatusOr<VisionTowerWeights> VisionTowerWeightsOn(const VisionTowerWeights& weights, Device device);

// Tokens per image that VisionTowerFeatures returns: positions, minus 1 for "default".
int64_t SelectedTokensPerImage(const model::LlavaConfig& config);

}  // namespace framezip::engine::vision
