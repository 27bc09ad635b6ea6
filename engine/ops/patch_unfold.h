// The patch embedding's input: images cut into P×P patches, each patch one row, so the
// convolution with stride = kernel = P (SigLIP's and CLIP's patch embedding) is one GEMM against
// its weight [D, C, P, P] read as [D, C·P·P].
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

// pixels [B, C, S, S] f32 (channels first), S >= `patch`; cols [B·G·G, C·P·P] f32, G = ⌊S / P⌋
// (pixels beyond the last whole patch are not read, as the strided conv ignores them; SigLIP's
// 384 = 27·14 + 6): row (b, gy, gx) in raster order, column (ch, ky, kx), each value rounded to
// `round_to` (bf16 or f16, to nearest even: what the patch GEMM would round it to; f32 keeps it
// as it is). On a GPU one launch over pixels already there, so a tower sends its frames' pixels
// and the unfold costs the host nothing. INVALID_ARGUMENT naming the mismatched tensor.
Status UnfoldPatches(const Tensor& pixels, int64_t patch, DType round_to, Tensor& cols);

}  // namespace framezip::engine::ops
