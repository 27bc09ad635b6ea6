// Row normalisations over the last dimension, f32 activations, 16- or 32-bit parameters:
//   RMSNorm:   y = x · rsqrt(mean(x²) + eps) · weight                  (Qwen2RMSNorm)
//   LayerNorm: y = (x − mean) · rsqrt(var + eps) · gamma + beta         (nn.LayerNorm, biased var)
// One block per row; statistics in f32 with a two-pass (centred) variance like the CPU op.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/cuda/cast.cuh"

namespace framezip::engine::cuda {

struct NormParams {
  const float* x = nullptr;       // [rows, d]
  float* y = nullptr;             // [rows, d]; may equal x
  const void* weight = nullptr;   // [d] of weight_kind (RMSNorm weight, LayerNorm gamma)
  const void* bias = nullptr;     // [d] of bias_kind, LayerNorm beta; nullptr for none
  FloatKind weight_kind = FloatKind::kF32;
  FloatKind bias_kind = FloatKind::kF32;
  int64_t rows = 0;
  int64_t d = 0;
  float eps = 1e-6f;
};

// Never allocate; return the launch error.
cudaError_t LaunchRmsNorm(const NormParams& params, cudaStream_t stream);
cudaError_t LaunchLayerNorm(const NormParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
