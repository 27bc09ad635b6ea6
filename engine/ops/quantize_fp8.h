// Weights quantised at load to FP8 E4M3 (engine/core/float8.h), symmetric per output channel (row
// of W [N, K]):
//   scale[j] = max_k |W[j][k]| / 448 (0 for a zero row),
//   q[j][k]  = e4m3(W[j][k] · (448 / max_k |W[j][k]|)), rounded to nearest even,
// so W[j][k] ≈ e4m3(q[j][k]) · scale[j] within half an E4M3 step (2^-4 relative for normal
// values). What Linear reads with its FP8 overload on sm_90 GPUs (ops/linear.h), and the layout of
// a Hugging Face `compressed-tensors` FP8 channel-wise checkpoint (weight F8_E4M3 [N, K],
// weight_scale [N]). The row's largest magnitude maps to 448 exactly, so no code saturates.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

struct Fp8Weight {
  Tensor q;      // [N, K] f8e4m3, owning, on the CPU
  Tensor scale;  // [N] f32, owning, on the CPU
};

// Quantises w [N, K] (f32, bf16 or f16, on the CPU) as above, in parallel on ComputePool().
// INVALID_ARGUMENT for another rank, dtype or device, naming it.
StatusOr<Fp8Weight> QuantizeWeightFp8(const Tensor& w);

// `weight` replaced by its FP8 copy and `scale` by its scales, unless it is quantised already
// (int8 or FP8: IsQuantizedWeightDType), which leaves both as they are.
Status QuantizeWeightFp8InPlace(Tensor& weight, Tensor& scale);

}  // namespace framezip::engine::ops
