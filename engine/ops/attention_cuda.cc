// Attention on the GPU: adapter to engine/kernels/cuda/attention.cuh (f32) and, when the caller
// allows it, bf16 tensor cores: attention_mma.cuh or FlashInfer (flashinfer_prefill.cuh), as
// AttentionParams::tensor_core_kernel picks. params.key_limit is a host array (the CPU
// op's contract); here it is copied to a temporary on the GPU for the launch.
#include <algorithm>
#include <cmath>
#include <string>

#include "engine/kernels/cuda/attention.cuh"
#include "engine/kernels/cuda/attention_mma.cuh"
#include "engine/kernels/cuda/flashinfer_prefill.cuh"
#include "engine/ops/cast.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"
#include "engine/ops/row_slices.h"

namespace framezip::engine::ops {
namespace {

// The head size the tensor-core kernel runs for `d` (it is built for 64, 80 and 128), or 0 when
// the f32 kernel must run. Other sizes up to 128 are zero-padded to the next of them (SigLIP's 72
// to 80): zero channels add nothing to q·k, and the output's extra channels are dropped.
int64_t TensorCoreHeadDim(const Tensor& q, const AttentionParams& params) {
  const int64_t d = q.dim(3);
  if (!params.allow_bf16_tensor_cores || params.key_limit != nullptr ||
      q.dim(1) < kTensorCoreMinQueries || d > 128) {
    return 0;
  }
  if (d <= 64) return 64;
  return d <= 80 ? 80 : 128;
}

// x [B, T, H, d] f32 as a bf16 [B, T, H, padded] tensor, zero beyond channel d.
StatusOr<Tensor> PaddedBf16(const Tensor& x, int64_t padded) {
  const int64_t d = x.dim(3), rows = x.numel() / std::max<int64_t>(d, 1);
  Tensor f32 = x;
  if (padded != d) {
    FZ_ASSIGN_OR_RETURN(
        f32, Tensor::Zeros({x.dim(0), x.dim(1), x.dim(2), padded}, DType::kF32, x.device()));
    FZ_RETURN_IF_ERROR(CopyRowSlices(
        x.device(), rows, d, {.data = static_cast<const float*>(x.raw_data()), .stride = d},
        {.data = static_cast<float*>(f32.raw_data()), .stride = padded}));
  }
  FZ_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(f32.shape(), DType::kBF16, x.device()));
  FZ_RETURN_IF_ERROR(Cast(f32, out));
  return out;
}

Status TensorCoreAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionParams& params, float scale, int64_t padded,
                           Tensor& out) {
  // Temporaries are freed on return; the caching allocator hands them out again only to later
  // work on this stream.
  const int64_t d = q.dim(3);
  FZ_ASSIGN_OR_RETURN(Tensor q16, PaddedBf16(q, padded));
  FZ_ASSIGN_OR_RETURN(Tensor k16, PaddedBf16(k, padded));
  FZ_ASSIGN_OR_RETURN(Tensor v16, PaddedBf16(v, padded));
  Tensor wide = out;  // the kernel's output: out itself, or [B, Tq, H, padded] to cut down
  if (padded != d) {
    FZ_ASSIGN_OR_RETURN(
        wide, Tensor::Empty({q.dim(0), q.dim(1), q.dim(2), padded}, DType::kF32, q.device()));
  }
  cuda::AttentionMmaParams p;
  p.q = q16.raw_data();
  p.k = k16.raw_data();
  p.v = v16.raw_data();
  p.out = static_cast<float*>(wide.raw_data());
  p.batch = q.dim(0);
  p.tq = q.dim(1);
  p.tk = k.dim(1);
  p.heads = static_cast<int>(q.dim(2));
  p.kv_heads = static_cast<int>(k.dim(2));
  p.head_dim = static_cast<int>(padded);
  p.scale = scale;  // of the real head size
  p.causal = params.causal;
  p.q_offset = params.q_offset;
  p.pipelined = true;
  FZ_RETURN_IF_ERROR(LaunchStatus(cuda::LaunchAttentionMma(p, CurrentFramezipStream()),
                                  "Attention (tensor cores)"));
  if (padded == d) return absl::OkStatus();
  return CopyRowSlices(out.device(), out.numel() / d, d,
                       {.data = static_cast<const float*>(wide.raw_data()), .stride = padded},
                       {.data = static_cast<float*>(out.raw_data()), .stride = d});
}

// Why FlashInfer's prefill cannot serve this call, or "" when it can.
std::string FlashInferRefusal(const Tensor& q, const Tensor& k, const AttentionParams& params) {
  const int64_t d = q.dim(3);
  if (!cuda::FlashInferBuilt()) return "this framezip binary was built without FlashInfer";
  if (!cuda::FlashInferPrefillSupports(static_cast<int>(d))) {
    return fmt::format("FlashInfer's prefill takes head_dim 64 or 128, not {}", d);
  }
  if (params.key_limit != nullptr) return "FlashInfer's prefill takes no per-query key limit";
  if (params.causal && params.q_offset != k.dim(1) - q.dim(1)) {
    return fmt::format(
        "FlashInfer's causal mask places the {} queries last among the {} keys (q_offset {}), "
        "not at q_offset {}",
        q.dim(1), k.dim(1), k.dim(1) - q.dim(1), params.q_offset);
  }
  return "";
}

Status FlashInferAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionParams& params, float scale, Tensor& out) {
  FZ_ASSIGN_OR_RETURN(Tensor q16, PaddedBf16(q, q.dim(3)));
  FZ_ASSIGN_OR_RETURN(Tensor k16, PaddedBf16(k, k.dim(3)));
  FZ_ASSIGN_OR_RETURN(Tensor v16, PaddedBf16(v, v.dim(3)));
  FZ_ASSIGN_OR_RETURN(Tensor out16, Tensor::Empty(out.shape(), DType::kBF16, out.device()));
  cuda::FlashInferPrefillParams p;
  p.q = q16.raw_data();
  p.k = k16.raw_data();
  p.v = v16.raw_data();
  p.out = out16.raw_data();
  p.batch = q.dim(0);
  p.tq = q.dim(1);
  p.tk = k.dim(1);
  p.heads = static_cast<int>(q.dim(2));
  p.kv_heads = static_cast<int>(k.dim(2));
  p.head_dim = static_cast<int>(q.dim(3));
  p.scale = scale;
  p.causal = params.causal;
  std::string error;
  const cudaError_t launched = cuda::LaunchFlashInferPrefill(p, CurrentFramezipStream(), &error);
  if (!error.empty()) return InternalError("Attention (FlashInfer): {}", error);
  FZ_RETURN_IF_ERROR(LaunchStatus(launched, "Attention (FlashInfer)"));
  return Cast(out16, out);
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
  if (params.allow_bf16_tensor_cores &&
      params.tensor_core_kernel == TensorCoreKernel::kFlashInfer) {
    if (const std::string why = FlashInferRefusal(q, k, params); !why.empty()) {
      return UnimplementedError("Attention: {}", why);
    }
    return FlashInferAttention(q, k, v, params, scale, out);
  }
  if (const int64_t padded = TensorCoreHeadDim(q, params); padded > 0) {
    if (params.tensor_core_kernel == TensorCoreKernel::kAuto &&
        FlashInferRefusal(q, k, params).empty()) {
      return FlashInferAttention(q, k, v, params, scale, out);
    }
    return TensorCoreAttention(q, k, v, params, scale, padded, out);
  }
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
  Tensor
      limits;  // freed on return: the stream-ordered caching allocator reuses it after the kernel
  if (params.key_limit != nullptr && p.tq > 0) {
    FZ_ASSIGN_OR_RETURN(
        limits, DeviceI32(std::span<const int32_t>(params.key_limit, static_cast<size_t>(p.tq)),
                          q.device()));
    p.key_limit = static_cast<const int32_t*>(limits.raw_data());
  }
  return LaunchStatus(cuda::LaunchAttention(p, CurrentFramezipStream()), "Attention");
}

}  // namespace framezip::engine::ops
