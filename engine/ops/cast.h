// Cast: converts every element of `in` to `out`'s dtype (f32, f16, bf16), same shape, same device.
// f32 -> 16-bit rounds to nearest even, as torch does.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

// INVALID_ARGUMENT when shapes or devices differ or a dtype is not a float type.
Status Cast(const Tensor& in, Tensor& out);

}  // namespace framezip::engine::ops
