// QuickGelu: CLIP's "quick_gelu" activation, y = x · sigmoid(1.702 · x), element-wise, f32
// (transformers QuickGELUActivation; CLIP ViT-L/14 MLP, docs/models.md §3.2).
//
// x, y: f32, same shape; y may be x (in place).
// Errors: INVALID_ARGUMENT when shapes differ, devices differ or a tensor is not f32; on a CUDA
// device UNIMPLEMENTED in a CPU-only build, UNAVAILABLE without a GPU.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

Status QuickGelu(const Tensor& x, Tensor& y);

}  // namespace framezip::engine::ops
