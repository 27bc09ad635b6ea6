// Patch unfold for the patch-embedding GEMM (ops/patch_unfold.h): pixels [B, C, S, S] f32 into
// cols [B·(S/P)², C·P·P] f32, row (b, gy, gx), column (ch, ky, kx), each value rounded to
// `round_to` (kBF16 / kF16 to nearest even, kF32 as it is). One thread per output element.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/cuda/cast.cuh"

namespace framezip::engine::cuda {

struct UnfoldPatchesParams {
  const float* pixels = nullptr;
  float* cols = nullptr;
  int64_t images = 0;
  int64_t channels = 0;
  int64_t side = 0;   // S >= patch; pixels past the last whole patch are not read
  int64_t patch = 0;  // P
  FloatKind round_to = FloatKind::kF32;
};

cudaError_t LaunchUnfoldPatches(const UnfoldPatchesParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
