// Row normalisations over the last dimension, f32 activations, 16- or 32-bit parameters:
//   RMSNorm:   y = x · rsqrt(mean(x²) + eps) · weight                  (Qwen2RMSNorm)
//              optionally after residual += x, with the sum normalised (fused residual add)
//   LayerNorm: y = (x − mean) · rsqrt(var + eps) · gamma + beta         (nn.LayerNorm, biased var)
//   Softmax:   y = e^(x − max) · (1 / Σ e^(x − max)); a row of all −inf becomes zeros
//   (ops/softmax.h)
// One block per row; statistics in f32 with a two-pass (centred) variance like the CPU op.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/cuda/cast.cuh"

namespace framezip::engine::cuda {

struct NormParams {
  const float* x = nullptr;      // [rows, d]
  float* y = nullptr;            // [rows, d]; may equal x
  float* residual = nullptr;     // RMSNorm only: [rows, d], += x first, then normalised; not y
  const void* weight = nullptr;  // [d] of weight_kind (RMSNorm weight, LayerNorm gamma)
  const void* bias = nullptr;    // [d] of bias_kind, LayerNorm beta; nullptr for none
  FloatKind weight_kind = FloatKind::kF32;
  FloatKind bias_kind = FloatKind::kF32;
  int64_t rows = 0;
  int64_t d = 0;
  float eps = 1e-6f;
};

struct SoftmaxParams {
  const float* x = nullptr;  // [rows, n]
  float* y = nullptr;        // [rows, n]; may equal x
  int64_t rows = 0;
  int64_t n = 0;
};

// Never allocate; return the launch error.
cudaError_t LaunchRmsNorm(const NormParams& params, cudaStream_t stream);
cudaError_t LaunchLayerNorm(const NormParams& params, cudaStream_t stream);
cudaError_t LaunchSoftmax(const SoftmaxParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
