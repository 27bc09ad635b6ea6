// Bilinear resize (ops::BilinearResize, PyTorch's F.interpolate bilinear, align_corners=False,
// no antialias) of [N, C, H, W] or [N, H, W, C] images of one float kind. The taps and the blend
// use round-to-nearest multiplies and adds without contraction into FMAs, in the CPU op's order,
// so the result is bit-identical to engine/ops/bilinear_resize_cpu.cc.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/cuda/cast.cuh"

namespace framezip::engine::cuda {

struct BilinearResizeParams {
  const void* in = nullptr;  // [N, C, H_in, W_in] or [N, H_in, W_in, C]
  void* out = nullptr;       // [N, C, H_out, W_out] or [N, H_out, W_out, C]
  FloatKind kind = FloatKind::kF32;
  bool channels_last = false;
  int64_t n = 0, c = 0, h_in = 0, w_in = 0, h_out = 0, w_out = 0;
};

// Never allocates; returns the launch error.
cudaError_t LaunchBilinearResize(const BilinearResizeParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
