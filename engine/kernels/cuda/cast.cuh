// Element-wise conversion between f32, f16 and bf16 on the GPU, and f32 rows quantised to FP8
// E4M3 with one scale per row (the activations of an FP8 GEMM, ops/linear_fp8_cuda.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace framezip::engine::cuda {

enum class FloatKind : uint8_t { kF32, kF16, kBF16 };

struct CastParams {
  const void* in = nullptr;  // [n] of in_kind
  void* out = nullptr;       // [n] of out_kind
  int64_t n = 0;
  FloatKind in_kind = FloatKind::kF32;
  FloatKind out_kind = FloatKind::kF32;
};

// Never allocates; returns the launch error.
cudaError_t LaunchCast(const CastParams& params, cudaStream_t stream);

// Row r of x [rows, k] f32 becomes q[r] (E4M3 bytes, row stride k) and scale[r], so that
// x[r][i] ≈ e4m3(q[r][i]) · scale[r]: amax = max_i |x[r][i]|, scale = amax / 448 and
// q = round-to-nearest-even(x · (448 / amax)), saturated to ±448 (a row of zeros: scale 0, q 0).
// Those exact f32 steps are what a host reference repeats to get the same bytes.
struct QuantizeRowsFp8Params {
  const float* x = nullptr;
  uint8_t* q = nullptr;
  float* scale = nullptr;
  int64_t rows = 0, k = 0;
};

// One block per row. Never allocates; returns the launch error.
cudaError_t LaunchQuantizeRowsFp8(const QuantizeRowsFp8Params& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
