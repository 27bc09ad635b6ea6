// The CPU entry points of Linear with int8 weights (internal to engine/ops; linear.cc calls them
// after checking every argument). Kernels in gemm_int8.h.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

// x [M, K] f32; weight [N, K] i8 and weight_scale [N] f32 (quantize_int8.h); bias [N] or
// undefined; y [M, N] f32.
Status LinearInt8Cpu(const Tensor& x, const Tensor& weight, const Tensor& weight_scale,
                     const Tensor& bias, Tensor& y);

// Packs an owning int8 weight into the kernels' layout now (see linear.h).
void PrepareLinearInt8Weight(const Tensor& weight, const Tensor& weight_scale);

// The int8 half of PackLinearWeight (linear.h): weight on the CPU, checked by the caller.
StatusOr<Tensor> PackedOnlyInt8Weight(const Tensor& weight, const Tensor& weight_scale);

}  // namespace framezip::engine::ops
