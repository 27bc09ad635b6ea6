// MergeAttentionParts and AttentionTokenShares on the GPU: adapters to the kernels of
// engine/kernels/cuda/low_rank.cuh (the dispatcher in attention_merge.cc checked every tensor).
#include "engine/kernels/cuda/low_rank.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {

Status MergeAttentionPartsCuda(const Tensor& base, const Tensor& base_lse, const Tensor& part_max,
                               const Tensor& part_sum, const Tensor& part_out, Tensor& out,
                               Tensor& total_max, Tensor& total_sum) {
  ScopedCudaDevice scope(base.device());
  cuda::AttentionMergeLaunch p;
  p.base = base.data<float>();
  p.base_lse = base_lse.data<float>();
  p.part_max = part_max.data<float>();
  p.part_sum = part_sum.data<float>();
  p.part_out = part_out.data<float>();
  p.out = out.data<float>();
  p.total_max = total_max.data<float>();
  p.total_sum = total_sum.data<float>();
  p.parts = static_cast<int>(part_max.dim(0));
  p.heads = static_cast<int>(base.dim(0));
  p.head_dim = static_cast<int>(base.dim(1));
  return LaunchStatus(cuda::LaunchAttentionMerge(p, CurrentFramezipStream()),
                      "MergeAttentionParts");
}

Status AttentionTokenSharesCuda(const Tensor& weights, const Tensor& part_max,
                                const Tensor& total_max, const Tensor& total_sum, Tensor& probs) {
  ScopedCudaDevice scope(weights.device());
  cuda::TokenSharesLaunch p;
  p.weights = weights.data<float>();
  p.part_max = part_max.data<float>();
  p.total_max = total_max.data<float>();
  p.total_sum = total_sum.data<float>();
  p.probs = probs.data<float>();
  p.heads = static_cast<int>(weights.dim(0));
  p.tokens = weights.dim(1);
  return LaunchStatus(cuda::LaunchTokenShares(p, CurrentFramezipStream()), "AttentionTokenShares");
}

}  // namespace framezip::engine::ops
