// Softmax over the last dimension, max-subtracted, in f32. x [..., N] f32; y same shape, may be x.
// -inf entries get probability 0; a row of all -inf becomes all zeros (not NaN).
// Errors: INVALID_ARGUMENT on shape/dtype/device mismatch; on a CUDA device UNIMPLEMENTED in a
// CPU-only build, UNAVAILABLE without a GPU.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

Status Softmax(const Tensor& x, Tensor& y);

}  // namespace framezip::engine::ops
