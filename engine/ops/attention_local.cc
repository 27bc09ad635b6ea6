#include "engine/ops/attention_local.h"

#include "engine/ops/attention_local_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

namespace {

constexpr std::string_view kOp = "LocalWindowAttention";

// Everything but the past's own pages: shapes, devices, heads, window and rows.
Status CheckArguments(const Tensor& q, const Tensor& k, const Tensor& v, const float* past_k,
                      const float* past_v, int64_t past, std::span<const int32_t> rows, int64_t h0,
                      int64_t nh, const LocalWindow& params, const Tensor& out) {
  if (q.rank() != 3 || k.rank() != 3 || k.shape() != v.shape() || q.shape() != out.shape() ||
      q.dim(0) != k.dim(0) || q.dim(2) != k.dim(2) || q.dtype() != DType::kF32 ||
      k.dtype() != DType::kF32 || v.dtype() != DType::kF32 || out.dtype() != DType::kF32) {
    return InvalidArgumentError(
        "LocalWindowAttention: want q, out [T, H, d] and k, v [T, G, d] f32; got q {} k {} v {} "
        "out {}",
        ShapeString(q.shape()), ShapeString(k.shape()), ShapeString(v.shape()),
        ShapeString(out.shape()));
  }
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, q.device(), {&k, &v, &out}));
  const int64_t t = q.dim(0), heads = q.dim(1), g = k.dim(1);
  if (g <= 0 || heads % g != 0 || h0 < 0 || nh < 0 || h0 + nh > heads) {
    return InvalidArgumentError("LocalWindowAttention: heads [{}, {}) of {} with {} KV heads", h0,
                                h0 + nh, heads, g);
  }
  if (params.window < 1 || params.sinks < 0) {
    return InvalidArgumentError("LocalWindowAttention: window {} must be >= 1 and sinks {} >= 0",
                                params.window, params.sinks);
  }
  if (past < 0) return InvalidArgumentError("LocalWindowAttention: past {} is negative", past);
  if (past > 0 && (past_k == nullptr || past_v == nullptr)) {
    return InvalidArgumentError("LocalWindowAttention: {} past tokens without their K/V", past);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= t || (i > 0 && rows[i] <= rows[i - 1])) {
      return InvalidArgumentError(
          "LocalWindowAttention: rows must be sorted, distinct and in [0, {})", t);
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status LocalWindowAttention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& past,
                            std::span<const int32_t> rows, int64_t h0, int64_t nh,
                            const LocalWindow& params, Tensor& out) {
  FZ_RETURN_IF_ERROR(CheckArguments(q, k, v, nullptr, nullptr, 0, rows, h0, nh, params, out));
  FZ_RETURN_IF_ERROR(CheckPastKv(kOp, past, k.dim(1), k.dim(2)));
  if (past.batch() == 0) {
    return LocalWindowAttentionOverRows(q, k, v, nullptr, nullptr, 0, rows, h0, nh, params, out);
  }
  FZ_ASSIGN_OR_RETURN(const GatheredKv dense, GatherPagedKv(past, 0, q.device()));
  return LocalWindowAttentionOverRows(q, k, v, dense.k.data<float>(), dense.v.data<float>(),
                                      dense.tokens, rows, h0, nh, params, out);
}

Status LocalWindowAttentionOverRows(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const float* past_k, const float* past_v, int64_t past,
                                    std::span<const int32_t> rows, int64_t h0, int64_t nh,
                                    const LocalWindow& params, Tensor& out) {
  FZ_RETURN_IF_ERROR(CheckArguments(q, k, v, past_k, past_v, past, rows, h0, nh, params, out));
  switch (q.device().kind) {
    case DeviceKind::kCpu:
      return LocalWindowAttentionCpu(q, k, v, past_k, past_v, past, rows, h0, nh, params, out);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(q.device()));
      return LocalWindowAttentionCuda(q, k, v, past_k, past_v, past, rows, h0, nh, params, out);
  }
  return InternalError("LocalWindowAttention: unknown device kind");
}

}  // namespace framezip::engine::ops
