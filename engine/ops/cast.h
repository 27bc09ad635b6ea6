// Cast: converts every element of `in` to `out`'s dtype (f32, f16, bf16), same shape, same device.
// f32 -> 16-bit rounds to nearest even, as torch does.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

// INVALID_ARGUMENT when shapes or devices differ or a dtype is not a float type.
Status Cast(const Tensor& in, Tensor& out);

// `count` elements at `src` (dtype `from`) into `dst` as dtype `to`, both raw pointers on
// `device` (a page's keys, a span's values): an f32 row copy when both are f32, else Cast over
// views. Either way queued on the stream every op uses on a GPU.
Status ConvertElements(Device device, const void* src, DType from, void* dst, DType to,
                       int64_t count);

}  // namespace framezip::engine::ops
