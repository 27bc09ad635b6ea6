// Linear and MatMul: the GEMMs of the decoder and the vision tower.
//
//   Linear:  y[..., N] = x[..., K] · W[N, K]ᵀ (+ b[N])     (torch.nn.Linear; W stored [out, in])
//   MatMul:  c[M, N]   = a[M, K] · b[K, N]   (or b[N, K]ᵀ when transpose_b)
//
// dtypes: activations x, y, a, b, c are f32. The weight W (and bias b) may be f32, bf16 or f16;
// 16-bit weights stay 16-bit in memory. CPU strategy:
//   - M >= kLinearGemvMaxRows (prefill, ViT): W is converted tile by tile (a few hundred rows at a
//     time, inside each thread) to f32 and multiplied with OpenBLAS sgemm; tiles run in parallel
//     on ComputePool() with OpenBLAS single-threaded.
//   - small M (decode steps): a bandwidth-bound GEMV kernel reads each 16-bit weight row once and
//     dots it with every row of x (AVX2/FMA or AVX-512 chosen at run time, portable fallback).
// Accumulation is in f32 throughout.
//
// CUDA (linear_cuda.cc): cuBLAS GEMM with f32 accumulation; with 16-bit weights x is rounded to
// the weight dtype on the GPU first (see there for the accuracy this costs).
// Errors: INVALID_ARGUMENT naming the mismatch (shapes, dtypes, devices: all tensors must be on
// one device); on a CUDA device UNIMPLEMENTED in a CPU-only build, UNAVAILABLE without a GPU.
// y must be preallocated with the right shape and must not alias x.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

// Rows of x at or below which Linear uses the GEMV kernel instead of tiles + sgemm.
inline constexpr int64_t kLinearGemvMaxRows = 16;

// x [..., K] f32; weight [N, K] f32/bf16/f16; bias [N] f32/bf16/f16 or an undefined Tensor();
// y [..., N] f32 (same leading dims as x).
Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y);

// a [M, K] f32; b [K, N] f32 (or [N, K] when transpose_b); c [M, N] f32.
Status MatMul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& c);

}  // namespace framezip::engine::ops
