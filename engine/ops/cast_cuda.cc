#include <cuda_runtime_api.h>

#include "engine/kernels/cuda/cast.cuh"
#include "engine/ops/cast_backends.h"

namespace framezip::engine::ops {
namespace {
cuda::FloatKind Kind(DType t) {
  switch (t) {
    case DType::kF16:
      return cuda::FloatKind::kF16;
    case DType::kBF16:
      return cuda::FloatKind::kBF16;
    default:
      return cuda::FloatKind::kF32;
  }
}
}  // namespace

Status CastCuda(const Tensor& in, Tensor& out) {
  cuda::CastParams params;
  params.in = in.raw_data();
  params.out = out.raw_data();
  params.n = in.numel();
  params.in_kind = Kind(in.dtype());
  params.out_kind = Kind(out.dtype());
  cudaError_t err = cuda::LaunchCast(params, /*stream=*/nullptr);
  if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
  if (err != cudaSuccess) {
    return absl::InternalError(fmt::format("Cast on GPU: {}", cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
