// LLaVA's multi_modal_projector (mlp2x_gelu): y = linear_2(act(linear_1(x))), with biases when
// multimodal_projector_bias (default true) and act = projector_hidden_act ("gelu" = exact erf
// GELU, not the tanh approximation the SigLIP MLP uses; docs/models.md §1.2, §9 item 4).
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/model/config.h"
#include "engine/vision/vision_weights.h"

namespace framezip::engine::vision {

// features [..., D·nL] f32 (VisionTowerFeatures' output) -> [..., H] f32, H = text hidden size,
// on the features' device. The projection runs where the weights are (the features go there and
// the result comes back when they differ). INVALID_ARGUMENT when the last dimension is not the
// projector's input width.
StatusOr<Tensor> Project(const model::LlavaConfig& config, const ProjectorWeights& weights,
                         const Tensor& features);

// The projector's weights copied to `device` (in their dtype). RESOURCE_EXHAUSTED when the device
// memory runs out; UNIMPLEMENTED / UNAVAILABLE for a GPU without CUDA / without a GPU.
StatusOr<ProjectorWeights> ProjectorWeightsOn(const ProjectorWeights& weights, Device device);

}  // namespace framezip::engine::vision
