// Element-wise conversion between f32, f16 and bf16 on the GPU.
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

}  // namespace framezip::engine::cuda
