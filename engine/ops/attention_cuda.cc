// Attention on the GPU: adapter to engine/kernels/cuda/attention.cuh. params.key_limit is a host
// array (the CPU op's contract); here it is copied to a temporary on the GPU for the launch.
#include <cmath>

#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/attention.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {

Status AttentionCuda(const Tensor& q, const Tensor& k, const Tensor& v,
                     const AttentionParams& params, Tensor& out) {
  const int64_t d = q.dim(3);
  if (d > cuda::kAttentionMaxHeadDim) {
    return UnimplementedError("Attention on GPU: head_dim {} > {} is not supported yet", d,
                              cuda::kAttentionMaxHeadDim);
  }
  ScopedCudaDevice scope(q.device());
  cuda::AttentionParams p;
  p.q = static_cast<const float*>(q.raw_data());
  p.k = static_cast<const float*>(k.raw_data());
  p.v = static_cast<const float*>(v.raw_data());
  p.out = static_cast<float*>(out.raw_data());
  p.batch = q.dim(0);
  p.tq = q.dim(1);
  p.tk = k.dim(1);
  p.heads = static_cast<int>(q.dim(2));
  p.kv_heads = static_cast<int>(k.dim(2));
  p.head_dim = static_cast<int>(d);
  p.scale = params.scale > 0 ? params.scale : 1.0f / std::sqrt(static_cast<float>(d));
  p.causal = params.causal;
  p.q_offset = params.q_offset;
  Tensor limits;  // freed after the launch (cudaFree waits for the kernel)
  if (params.key_limit != nullptr && p.tq > 0) {
    FZ_ASSIGN_OR_RETURN(limits, Tensor::Empty({p.tq}, DType::kI32, q.device()));
    FZ_RETURN_IF_ERROR(CopyBytes(limits.raw_data(), q.device(), params.key_limit, Device::Cpu(),
                                 limits.nbytes()));
    p.key_limit = static_cast<const int32_t*>(limits.raw_data());
  }
  return CudaStatus(cuda::LaunchAttention(p, nullptr), "Attention");
}

}  // namespace framezip::engine::ops
