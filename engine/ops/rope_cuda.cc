// ApplyRope on the GPU. Positions are validated on the host (a copy of T int32: the CPU op's
// contract is INVALID_ARGUMENT for a negative position, not garbage) unless the caller checked its
// host copy already (ops::ApplyRope with host_positions), and the inverse
// frequencies, computed on the host exactly as the CPU op does, travel in the launch params.
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/rope.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {

Status ApplyRopeCuda(Tensor& x, const Tensor& positions, const RopeParams& params,
                     bool positions_checked) {
  const int64_t tokens = x.dim(0);
  if (params.head_dim / 2 > cuda::kRopeMaxHalfDim) {
    return InvalidArgumentError("ApplyRope on GPU: head_dim {} exceeds {}", params.head_dim,
                                2 * cuda::kRopeMaxHalfDim);
  }
  if (!positions_checked) {
    std::vector<int32_t> pos(static_cast<size_t>(tokens));
    FZ_RETURN_IF_ERROR(CopyBytes(pos.data(), Device::Cpu(), positions.raw_data(),
                                 positions.device(), pos.size() * sizeof(int32_t)));
    for (int64_t t = 0; t < tokens; ++t) {
      if (pos[t] < 0) {
        return InvalidArgumentError("ApplyRope: position {} of token {}", pos[t], t);
      }
    }
  }
  ScopedCudaDevice scope(x.device());
  cuda::RopeParams p;
  p.x = static_cast<float*>(x.raw_data());
  p.positions = static_cast<const int32_t*>(positions.raw_data());
  p.tokens = tokens;
  p.heads = static_cast<int>(x.dim(1));
  p.head_dim = params.head_dim;
  const std::vector<float> inv = RopeInverseFrequencies(params);
  for (size_t i = 0; i < inv.size(); ++i) p.inv_freq[i] = inv[i];
  return LaunchStatus(cuda::LaunchRope(p, CurrentFramezipStream()), "ApplyRope");
}

}  // namespace framezip::engine::ops
