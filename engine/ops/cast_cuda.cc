// Cast on the GPU: adapter to engine/kernels/cuda/cast.cuh. Like every op it returns once the
// kernel is queued on framezip's stream of the device (a later copy to the host waits for it).
#include "engine/kernels/cuda/cast.cuh"
#include "engine/ops/cast_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {

Status CastCuda(const Tensor& in, Tensor& out) {
  ScopedCudaDevice scope(in.device());
  cuda::CastParams params;
  params.in = in.raw_data();
  params.out = out.raw_data();
  params.n = in.numel();
  params.in_kind = KindOf(in.dtype());
  params.out_kind = KindOf(out.dtype());
  return LaunchStatus(cuda::LaunchCast(params, CurrentFramezipStream()), "Cast");
}

}  // namespace framezip::engine::ops
