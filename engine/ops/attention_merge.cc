#include "engine/ops/attention_merge.h"

#include "engine/core/step_counters.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {
namespace {

Status CheckF32(std::string_view op, std::string_view name, const Tensor& t, const Shape& shape,
                Device device) {
  FZ_RETURN_IF_ERROR(CheckDefined(op, name, t));
  FZ_RETURN_IF_ERROR(CheckDType(op, name, t, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckShape(op, name, t, shape));
  return CheckOnDevice(op, device, {&t});
}

}  // namespace

Status MergeAttentionParts(const Tensor& base, const Tensor& base_lse, const Tensor& part_max,
                           const Tensor& part_sum, const Tensor& part_out, Tensor& out,
                           Tensor& total_max, Tensor& total_sum) {
  constexpr std::string_view kOp = "MergeAttentionParts";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "base", base));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "base", base, 2));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "part_max", part_max, 2));
  const int64_t heads = base.dim(0), d = base.dim(1), parts = part_max.dim(0);
  const Device device = base.device();
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "base", base, {heads, d}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "base_lse", base_lse, {heads}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "part_max", part_max, {parts, heads}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "part_sum", part_sum, {parts, heads}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "part_out", part_out, {parts, heads, d}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "out", out, {heads, d}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "total_max", total_max, {heads}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "total_sum", total_sum, {heads}, device));
  if (heads == 0) return absl::OkStatus();
  if (device.is_cpu()) {
    CountLaunches(1);
    return MergeAttentionPartsCpu(base, base_lse, part_max, part_sum, part_out, out, total_max,
                                  total_sum);
  }
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  return MergeAttentionPartsCuda(base, base_lse, part_max, part_sum, part_out, out, total_max,
                                 total_sum);
}

Status AttentionTokenShares(const Tensor& weights, const Tensor& part_max, const Tensor& total_max,
                            const Tensor& total_sum, Tensor& probs) {
  constexpr std::string_view kOp = "AttentionTokenShares";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "weights", weights));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "weights", weights, 2));
  const int64_t heads = weights.dim(0), tokens = weights.dim(1);
  const Device device = weights.device();
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "weights", weights, {heads, tokens}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "part_max", part_max, {heads}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "total_max", total_max, {heads}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "total_sum", total_sum, {heads}, device));
  FZ_RETURN_IF_ERROR(CheckF32(kOp, "probs", probs, {tokens}, device));
  if (tokens == 0) return absl::OkStatus();
  if (heads == 0) {
    return InvalidArgumentError("{}: weights has no heads for its {} tokens", kOp, tokens);
  }
  if (device.is_cpu()) {
    CountLaunches(1);
    return AttentionTokenSharesCpu(weights, part_max, total_max, total_sum, probs);
  }
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  return AttentionTokenSharesCuda(weights, part_max, total_max, total_sum, probs);
}

}  // namespace framezip::engine::ops
