#include "engine/ops/paged_attention.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status PagedDecodeAttention(const Tensor& q, const PagedKv& kv, Tensor& out, float scale) {
  constexpr std::string_view kOp = "PagedDecodeAttention";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "q", q));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "out", out));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "q", q, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "out", out, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "q", q, 3));
  FZ_RETURN_IF_ERROR(CheckSameShape(kOp, "q", q, "out", out));
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, q.device(), {&out}));
  FZ_RETURN_IF_ERROR(CheckPagedKv(kOp, kv, q.dim(0)));
  if (q.dim(1) % kv.num_kv_heads != 0 || q.dim(2) != kv.head_dim) {
    return InvalidArgumentError("PagedDecodeAttention: q has {} heads × {} dims, the KV {} × {}",
                                q.dim(1), q.dim(2), kv.num_kv_heads, kv.head_dim);
  }
  if (out.raw_data() == q.raw_data()) {
    return InvalidArgumentError("PagedDecodeAttention: out must not alias q");
  }
  if (q.device().is_cpu()) return PagedDecodeAttentionCpu(q, kv, scale, out);
  // CUDA: q and out on the GPU, every span's pointers device pointers (the GPU page pool's).
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(q.device()));
  return PagedDecodeAttentionCuda(q, kv, scale, out);
}

Status PagedDecodeSupports(Device device, int64_t head_dim) {
  if (device.is_cpu() || head_dim == 32 || head_dim == 64 || head_dim == 128) {
    return absl::OkStatus();
  }
  return UnimplementedError(
      "PagedDecodeAttention on {}: head_dim {} (the GPU kernels are built for 32, 64 and 128)",
      DeviceName(device), head_dim);
}

}  // namespace framezip::engine::ops
