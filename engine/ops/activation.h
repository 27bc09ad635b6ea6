// Element-wise activations, f32 in and out, any shape.
//
//   Gelu(kErf):  y = x/2 · (1 + erf(x/√2))                         (nn.GELU(), projector)
//   Gelu(kTanh): y = x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))   (gelu_pytorch_tanh, SigLIP MLP)
//   SiluMul:     y = silu(gate) · up = gate / (1 + e^-gate) · up    (SwiGLU of Qwen2/Llama MLPs)
//   Add:         y = a + b                                          (residual adds)
//
// Outputs may alias an input (in place). Errors: INVALID_ARGUMENT when shapes differ or a tensor
// is not f32 or tensors are on different devices; on a CUDA device UNIMPLEMENTED in a CPU-only
// build, UNAVAILABLE without a GPU.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

enum class GeluApproximation { kErf, kTanh };

Status Gelu(const Tensor& x, GeluApproximation approximation, Tensor& y);

// gate, up, y: same shape.
Status SiluMul(const Tensor& gate, const Tensor& up, Tensor& y);

// SiluMul over the fused gate/up projection's output (one GEMM over the concatenated weights):
// gate_up [rows, 2·w] holds each row's gate then its up; y [rows, w] = silu(gate) ⊙ up, the same
// arithmetic as SiluMul. y must not alias gate_up.
Status SiluMulHalves(const Tensor& gate_up, Tensor& y);

// a, b, y: same shape.
Status Add(const Tensor& a, const Tensor& b, Tensor& y);

}  // namespace framezip::engine::ops
