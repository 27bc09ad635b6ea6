// Weights quantised at load to int8, symmetric per output channel (row of W [N, K]):
//   scale[j] = max_k |W[j][k]| / 127 (0 for a zero row),
//   q[j][k]  = round_half_even(W[j][k] · 127 / max_k |W[j][k]|), in [-127, 127],
// so W[j][k] ≈ q[j][k] · scale[j] with an error of at most scale[j] / 2. What Linear reads with
// its int8 overload (ops/linear.h, kernels in ops/gemm_int8.h), and the layout of a Hugging Face
// `compressed-tensors` int8 channel-wise checkpoint (weight int8 [N, K], weight_scale [N] or
// [N, 1]).
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

struct Int8Weight {
  Tensor q;      // [N, K] i8, owning, on the CPU
  Tensor scale;  // [N] f32, owning, on the CPU
};

// Quantises w [N, K] (f32, bf16 or f16, on the CPU) as above, in parallel on ComputePool().
// INVALID_ARGUMENT for another rank, dtype or device, naming it.
StatusOr<Int8Weight> QuantizeWeightInt8(const Tensor& w);

// `weight` replaced by its int8 copy and `scale` by its scales, unless it is quantised already
// (int8 or FP8: IsQuantizedWeightDType), which leaves both as they are.
Status QuantizeWeightInt8InPlace(Tensor& weight, Tensor& scale);

}  // namespace framezip::engine::ops
