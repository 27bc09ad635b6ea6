// LayerNorm over the last dimension (torch.nn.LayerNorm): for each row of D values,
//   y = (x - mean) / sqrt(var + eps) · gamma + beta,  var the biased (1/D) variance.
// Statistics in f64-free two-pass f32 (mean, then centred variance), as torch's CPU kernel.
//
// x [..., D] f32; gamma [D], beta [D] f32/bf16/f16 (beta may be an undefined Tensor() for none);
// y [..., D] f32, may be the same tensor as x (in place).
// Errors: INVALID_ARGUMENT on shape/dtype/device mismatch; on a CUDA device UNIMPLEMENTED in a
// CPU-only build, UNAVAILABLE without a GPU.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y);

}  // namespace framezip::engine::ops
