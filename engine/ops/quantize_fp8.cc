#include "engine/ops/quantize_fp8.h"

#include "engine/core/float8.h"
#include "engine/ops/quantize_per_channel.h"

namespace framezip::engine::ops {

StatusOr<Fp8Weight> QuantizeWeightFp8(const Tensor& w) {
  FZ_ASSIGN_OR_RETURN(auto q, QuantizePerChannel<Float8E4M3>("QuantizeWeightFp8", w, DType::kF8E4M3,
                                                             kFloat8E4M3Max, F32ToF8E4M3));
  return Fp8Weight{std::move(q.first), std::move(q.second)};
}

Status QuantizeWeightFp8InPlace(Tensor& weight, Tensor& scale) {
  if (IsQuantizedWeightDType(weight.dtype())) return absl::OkStatus();
  FZ_ASSIGN_OR_RETURN(Fp8Weight q, QuantizeWeightFp8(weight));
  weight = std::move(q.q);
  scale = std::move(q.scale);
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
