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

}  // namespace framezip::engine::ops
