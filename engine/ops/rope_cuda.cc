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

namespace {

// The kernels' head-size bound, and the positions checked on the host where the caller did not.
Status CheckForKernel(std::string_view op, const Tensor& positions, const RopeParams& params,
                      bool positions_checked) {
  if (params.head_dim / 2 > cuda::kRopeMaxHalfDim) {
    return InvalidArgumentError("{} on GPU: head_dim {} exceeds {}", op, params.head_dim,
                                2 * cuda::kRopeMaxHalfDim);
  }
  if (positions_checked) return absl::OkStatus();
  std::vector<int32_t> pos(static_cast<size_t>(positions.numel()));
  FZ_RETURN_IF_ERROR(CopyBytes(pos.data(), Device::Cpu(), positions.raw_data(), positions.device(),
                               pos.size() * sizeof(int32_t)));
  for (size_t t = 0; t < pos.size(); ++t) {
    if (pos[t] < 0) return InvalidArgumentError("{}: position {} of token {}", op, pos[t], t);
  }
  return absl::OkStatus();
}

}  // namespace

Status ApplyRopeCuda(Tensor& x, const Tensor& positions, const RopeParams& params,
                     bool positions_checked) {
  const int64_t tokens = x.dim(0);
  FZ_RETURN_IF_ERROR(CheckForKernel("ApplyRope", positions, params, positions_checked));
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

Status RopeSplitQkvCuda(const Tensor& qkv, const Tensor& positions, const RopeParams& params,
                        bool positions_checked, Tensor& q, Tensor& k, Tensor& v) {
  FZ_RETURN_IF_ERROR(CheckForKernel("RopeSplitQkv", positions, params, positions_checked));
  ScopedCudaDevice scope(qkv.device());
  cuda::RopeSplitQkvParams p;
  p.qkv = static_cast<const float*>(qkv.raw_data());
  p.q = static_cast<float*>(q.raw_data());
  p.k = static_cast<float*>(k.raw_data());
  p.v = static_cast<float*>(v.raw_data());
  p.positions = static_cast<const int32_t*>(positions.raw_data());
  p.tokens = qkv.dim(0);
  p.q_heads = static_cast<int>(q.dim(1));
  p.kv_heads = static_cast<int>(k.dim(1));
  p.head_dim = params.head_dim;
  const std::vector<float> inv = RopeInverseFrequencies(params);
  for (size_t i = 0; i < inv.size(); ++i) p.inv_freq[i] = inv[i];
  return LaunchStatus(cuda::LaunchRopeSplitQkv(p, CurrentFramezipStream()), "RopeSplitQkv");
}

}  // namespace framezip::engine::ops
