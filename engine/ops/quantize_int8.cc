#include "engine/ops/quantize_int8.h"

#include <algorithm>
#include <cmath>

#include "engine/ops/quantize_per_channel.h"

namespace framezip::engine::ops {

StatusOr<Int8Weight> QuantizeWeightInt8(const Tensor& w) {
  FZ_ASSIGN_OR_RETURN(
      auto q, QuantizePerChannel<int8_t>("QuantizeWeightInt8", w, DType::kI8, 127.f, [](float v) {
        const float r = std::nearbyint(v);
        return static_cast<int8_t>(std::clamp(r, -127.f, 127.f));
      }));
  return Int8Weight{std::move(q.first), std::move(q.second)};
}

Status QuantizeWeightInt8InPlace(Tensor& weight, Tensor& scale) {
  if (IsQuantizedWeightDType(weight.dtype())) return absl::OkStatus();
  FZ_ASSIGN_OR_RETURN(Int8Weight q, QuantizeWeightInt8(weight));
  weight = std::move(q.q);
  scale = std::move(q.scale);
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
