#include "engine/ops/attention.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status Attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                 Tensor& out) {
  constexpr std::string_view kOp = "Attention";
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}}) {
    FZ_RETURN_IF_ERROR(CheckDefined(kOp, name, *t));
    FZ_RETURN_IF_ERROR(CheckDType(kOp, name, *t, DType::kF32));
    FZ_RETURN_IF_ERROR(CheckRank(kOp, name, *t, 4));
  }
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, q.device(), {&k, &v, &out}));
  FZ_RETURN_IF_ERROR(CheckSameShape(kOp, "q", q, "out", out));
  FZ_RETURN_IF_ERROR(CheckSameShape(kOp, "k", k, "v", v));
  if (k.dim(0) != q.dim(0) || k.dim(3) != q.dim(3)) {
    return InvalidArgumentError("Attention: q {} and k {} differ in batch or head_dim",
                                ShapeString(q.shape()), ShapeString(k.shape()));
  }
  const int64_t heads = q.dim(2), kv_heads = k.dim(2);
  if (kv_heads <= 0 || heads % kv_heads != 0) {
    return InvalidArgumentError("Attention: {} query heads are not a multiple of {} KV heads",
                                heads, kv_heads);
  }
  if (params.key_limit != nullptr) {
    for (int64_t i = 0; i < q.dim(1); ++i) {
      if (params.key_limit[i] < 0) {
        return InvalidArgumentError("Attention: key_limit[{}] = {} is negative", i,
                                    params.key_limit[i]);
      }
    }
  }
  if (params.causal && params.q_offset < 0) {
    return InvalidArgumentError("Attention: q_offset {} is negative", params.q_offset);
  }
  if (out.raw_data() == q.raw_data() || out.raw_data() == k.raw_data() ||
      out.raw_data() == v.raw_data()) {
    return InvalidArgumentError("Attention: out must not alias q, k or v");
  }
  switch (q.device().kind) {
    case DeviceKind::kCpu:
      return AttentionCpu(q, k, v, params, out);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(q.device()));
      return AttentionCuda(q, k, v, params, out);
  }
  return InternalError("Attention: unknown device kind");
}

Status BidirectionalAttention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                              float scale) {
  return Attention(q, k, v, AttentionParams{.scale = scale, .causal = false, .q_offset = 0}, out);
}

Status CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out) {
  if (q.rank() == 4 && k.rank() == 4 && q.dim(1) > k.dim(1)) {
    return InvalidArgumentError("CausalAttention: {} queries but only {} keys", q.dim(1), k.dim(1));
  }
  const int64_t offset = (q.rank() == 4 && k.rank() == 4) ? k.dim(1) - q.dim(1) : 0;
  return Attention(q, k, v, AttentionParams{.scale = 0, .causal = true, .q_offset = offset}, out);
}

}  // namespace framezip::engine::ops
