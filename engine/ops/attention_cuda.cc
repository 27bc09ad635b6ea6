// Attention on the GPU: adapter to engine/kernels/cuda/attention.cuh (f32) and, when the caller
// allows it, attention_mma.cuh (bf16 tensor cores). params.key_limit is a host array (the CPU
// op's contract); here it is copied to a temporary on the GPU for the launch.
#include <cmath>

#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/attention.cuh"
#include "engine/kernels/cuda/attention_mma.cuh"
#include "engine/kernels/cuda/cast.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {
namespace {

bool UseTensorCores(const Tensor& q, const AttentionParams& params) {
  const int64_t d = q.dim(3);
  return params.allow_bf16_tensor_cores && params.key_limit == nullptr && (d == 64 || d == 128) &&
         q.dim(1) >= kTensorCoreMinQueries;
}

// A bf16 copy of an f32 tensor on its device (the tensor-core kernel's operands).
StatusOr<Tensor> ToBf16(const Tensor& t) {
  FZ_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), DType::kBF16, t.device()));
  cuda::CastParams c;
  c.in = t.raw_data();
  c.out = out.raw_data();
  c.n = t.numel();
  c.in_kind = cuda::FloatKind::kF32;
  c.out_kind = cuda::FloatKind::kBF16;
  FZ_RETURN_IF_ERROR(CudaStatus(cuda::LaunchCast(c, nullptr), "Attention (bf16 operands)"));
  return out;
}

Status TensorCoreAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionParams& params, float scale, Tensor& out) {
  // Freed on return; the caching allocator hands them out again only to later work on this
  // stream.
  FZ_ASSIGN_OR_RETURN(Tensor q16, ToBf16(q));
  FZ_ASSIGN_OR_RETURN(Tensor k16, ToBf16(k));
  FZ_ASSIGN_OR_RETURN(Tensor v16, ToBf16(v));
  cuda::AttentionMmaParams p;
  p.q = q16.raw_data();
  p.k = k16.raw_data();
  p.v = v16.raw_data();
  p.out = static_cast<float*>(out.raw_data());
  p.batch = q.dim(0);
  p.tq = q.dim(1);
  p.tk = k.dim(1);
  p.heads = static_cast<int>(q.dim(2));
  p.kv_heads = static_cast<int>(k.dim(2));
  p.head_dim = static_cast<int>(q.dim(3));
  p.scale = scale;
  p.causal = params.causal;
  p.q_offset = params.q_offset;
  p.pipelined = true;
  return CudaStatus(cuda::LaunchAttentionMma(p, nullptr), "Attention (tensor cores)");
}

}  // namespace

Status AttentionCuda(const Tensor& q, const Tensor& k, const Tensor& v,
                     const AttentionParams& params, Tensor& out) {
  const int64_t d = q.dim(3);
  if (d > cuda::kAttentionMaxHeadDim) {
    return UnimplementedError("Attention on GPU: head_dim {} > {} is not supported yet", d,
                              cuda::kAttentionMaxHeadDim);
  }
  ScopedCudaDevice scope(q.device());
  const float scale = params.scale > 0 ? params.scale : 1.0f / std::sqrt(static_cast<float>(d));
  if (UseTensorCores(q, params)) return TensorCoreAttention(q, k, v, params, scale, out);
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
  p.scale = scale;
  p.causal = params.causal;
  p.q_offset = params.q_offset;
  Tensor limits;  // freed after the launch (cudaFree waits for the kernel)
  if (params.key_limit != nullptr && p.tq > 0) {
    FZ_ASSIGN_OR_RETURN(limits, Tensor::Empty({p.tq}, DType::kI32, q.device()));
    FZ_RETURN_IF_ERROR(
        CopyBytes(limits.raw_data(), q.device(), params.key_limit, Device::Cpu(), limits.nbytes()));
    p.key_limit = static_cast<const int32_t*>(limits.raw_data());
  }
  return CudaStatus(cuda::LaunchAttention(p, nullptr), "Attention");
}

}  // namespace framezip::engine::ops
