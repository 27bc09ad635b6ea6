// BilinearResize: PyTorch's F.interpolate(mode="bilinear", align_corners=False, antialias=False)
// with an explicit output size, as LLaVA-OneVision uses it for 2x2 video pooling (27x27 -> 14x14)
// and for the anyres shrink (docs/models.md §1.4 step 4, §1.5 step 2, §1.8).
//
// Per axis with input size `in` and output size `out`: scale = float(in) / out;
// src = max(scale * (d + 0.5) - 0.5, 0); i0 = min(floor(src), in - 1); i1 = i0 + 1 if i0 < in - 1
// else i0; w1 = clamp(src - i0, 0, 1); w0 = 1 - w1. The 2-D result is
// wh0 * (ww0 * x[i0][j0] + ww1 * x[i0][j1]) + wh1 * (ww0 * x[i1][j0] + ww1 * x[i1][j1]),
// in PyTorch's order of evaluation, accumulated in f32 whatever the storage dtype. Upscaling works
// too (same formula); there is no antialiasing when downscaling, exactly like the reference.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

// Where the channel axis is. Channels are independent, so both give the same numbers; the video
// path keeps its features token-major ([frames, rows, cols, hidden]) and avoids two transposes.
enum class ImageLayout {
  kChannelsFirst,  // [N, C, H, W] (PyTorch's NCHW)
  kChannelsLast,   // [N, H, W, C]
};

// in:  [N, C, H_in, W_in] or [N, H_in, W_in, C] (per `layout`), f32 / f16 / bf16
// out: [N, C, H_out, W_out] or [N, H_out, W_out, C], same dtype and device; the output size is
//      taken from out's shape (all sizes >= 1).
// INVALID_ARGUMENT when ranks, N, C, dtypes or devices disagree or a size is 0. On CUDA the
// result is bit-identical to the CPU's (engine/kernels/cuda/bilinear_resize.cuh); UNIMPLEMENTED
// in builds without CUDA.
Status BilinearResize(const Tensor& in, Tensor& out, ImageLayout layout);

// The output size LLaVA-OneVision's video pooling asks for: ceil(in / 2) (27 -> 14).
constexpr int64_t HalfSizeCeil(int64_t in) { return (in + 1) / 2; }

}  // namespace framezip::engine::ops
