// RMSNorm over the last dimension (Qwen2RMSNorm / LlamaRMSNorm):
//   y = x · rsqrt(mean(x²) + eps) · weight
// computed in f32. (HF casts the normalised value to the model dtype before the weight multiply;
// our activations are f32, so with f32 weights this is bit-for-bit the f32 reference.)
//
// x [..., D] f32; weight [D] f32/bf16/f16; y [..., D] f32, may be x (in place).
// Errors: INVALID_ARGUMENT on shape/dtype/device mismatch; on a CUDA device UNIMPLEMENTED in a
// CPU-only build, UNAVAILABLE without a GPU.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

Status RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y);

// The residual add fused with the RMSNorm that follows it (vLLM's fused_add_rms_norm):
//   residual += x;  y = RMSNorm(residual) · weight
// On a GPU one kernel reads each row once instead of an Add and an RmsNorm reading it twice; on
// the CPU it is exactly Add then RmsNorm. residual, x, y [..., D] f32, one shape; y may be x, not
// residual.
Status AddRmsNorm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, Tensor& y);

}  // namespace framezip::engine::ops
