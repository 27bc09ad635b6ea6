// UnfoldPatches on the GPU: the arguments were checked by ops/patch_unfold.cc; this adapts them to
// the raw-pointer launcher.
#include "engine/kernels/cuda/patch_unfold.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {

Status UnfoldPatchesCuda(const Tensor& pixels, int64_t patch, DType round_to, Tensor& cols) {
  ScopedCudaDevice scope(pixels.device());
  cuda::UnfoldPatchesParams p;
  p.pixels = static_cast<const float*>(pixels.raw_data());
  p.cols = static_cast<float*>(cols.raw_data());
  p.images = pixels.dim(0);
  p.channels = pixels.dim(1);
  p.side = pixels.dim(2);
  p.patch = patch;
  p.round_to = KindOf(round_to);
  return LaunchStatus(cuda::LaunchUnfoldPatches(p, CurrentFramezipStream()), "UnfoldPatches");
}

}  // namespace framezip::engine::ops
