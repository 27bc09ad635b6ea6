// BilinearResize on the GPU (the vision path's 2x2 video pooling and anyres shrink): the
// arguments were checked by ops/bilinear_resize.cc; this adapts them to the raw-pointer launcher.
#include "engine/kernels/cuda/bilinear_resize.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {

Status BilinearResizeCuda(const Tensor& in, Tensor& out, ImageLayout layout) {
  const bool first = layout == ImageLayout::kChannelsFirst;
  ScopedCudaDevice scope(in.device());
  cuda::BilinearResizeParams p;
  p.in = in.raw_data();
  p.out = out.raw_data();
  p.kind = KindOf(in.dtype());
  p.channels_last = !first;
  p.n = in.dim(0);
  p.c = in.dim(first ? 1 : 3);
  p.h_in = in.dim(first ? 2 : 1);
  p.w_in = in.dim(first ? 3 : 2);
  p.h_out = out.dim(first ? 2 : 1);
  p.w_out = out.dim(first ? 3 : 2);
  return LaunchStatus(cuda::LaunchBilinearResize(p, CurrentFramezipStream()), "BilinearResize");
}

}  // namespace framezip::engine::ops
