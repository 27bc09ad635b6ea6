// Element-wise f32 kernels of the decoder and the vision tower:
//   SiluMul:  y = gate / (1 + e^−gate) · up      (SwiGLU); SiluMulHalves takes gate and up
//             as the halves of each row of one fused [rows, 2·w] input
//   Add:      y = a + b                          (residual adds)
//   Gelu:     erf or tanh form                   (projector, SigLIP MLP), or CLIP's quick form
//             x · sigmoid(1.702x)                (QuickGELU, CLIP ViT MLP)
//   AddBias:  y[r, j] += bias[j]                 (Linear's bias after the GEMM)
// Outputs may alias inputs. Grid-stride loops; none allocates.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/cuda/cast.cuh"

namespace framezip::engine::cuda {

struct BinaryParams {
  const float* a = nullptr;  // SiluMul: gate
  const float* b = nullptr;  // SiluMul: up
  float* y = nullptr;
  int64_t n = 0;
};

enum class GeluForm : uint8_t { kErf, kTanh, kQuick };

struct GeluParams {
  const float* x = nullptr;
  float* y = nullptr;
  int64_t n = 0;
  GeluForm form = GeluForm::kErf;
};

struct AddBiasParams {
  float* y = nullptr;          // [rows, n], updated in place
  const void* bias = nullptr;  // [n] of bias_kind
  FloatKind bias_kind = FloatKind::kF32;
  int64_t rows = 0;
  int64_t n = 0;
};

cudaError_t LaunchSiluMul(const BinaryParams& params, cudaStream_t stream);
// y [rows, width] = silu(in[r, c]) · in[r, width + c], in [rows, 2·width].
struct SiluMulHalvesParams {
  const float* in = nullptr;
  float* y = nullptr;
  int64_t rows = 0;
  int64_t width = 0;
};
cudaError_t LaunchSiluMulHalves(const SiluMulHalvesParams& params, cudaStream_t stream);
cudaError_t LaunchAdd(const BinaryParams& params, cudaStream_t stream);
cudaError_t LaunchGelu(const GeluParams& params, cudaStream_t stream);
cudaError_t LaunchAddBias(const AddBiasParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
