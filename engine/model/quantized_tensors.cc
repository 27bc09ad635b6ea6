#include "engine/model/quantized_tensors.h"

#include <algorithm>
#include <cmath>

#include "engine/core/float8.h"
#include "engine/core/half.h"

namespace framezip::engine::model {

StatusOr<Tensor> ReadChannelScales(const StoredScale& s, const SafetensorsModel& files) {
  FZ_ASSIGN_OR_RETURN(const Tensor stored, files.Get(s.stored_name));
  const int64_t n = s.channels;
  const Shape& shape = stored.shape();
  const bool per_channel = shape == Shape{n} || shape == Shape{n, 1};
  const bool per_tensor = s.per_tensor_allowed && stored.numel() == 1 && shape.size() <= 1;
  if (!per_channel && !per_tensor) {
    return InvalidArgumentError(
        "tensor {} has shape {}, expected [{}, 1] or [{}]{} (in {})", s.name, ShapeString(shape), n,
        n, s.per_tensor_allowed ? ", [1] or []" : "", files.FileOf(s.stored_name));
  }
  FZ_ASSIGN_OR_RETURN(Tensor scale, Tensor::Empty({n}, DType::kF32));
  float* out = scale.data<float>();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = per_channel ? j : 0;
    switch (stored.dtype()) {
      case DType::kF32:
        out[j] = stored.data<float>()[at];
        break;
      case DType::kBF16:
        out[j] = BF16ToF32(stored.data<BFloat16>()[at]);
        break;
      case DType::kF16:
        out[j] = F16ToF32(stored.data<Float16>()[at]);
        break;
      default:
        return InvalidArgumentError("tensor {} has dtype {}, expected F32, F16 or BF16 (in {})",
                                    s.name, DTypeName(stored.dtype()), files.FileOf(s.stored_name));
    }
    if (!(out[j] >= 0) || !std::isfinite(out[j])) {
      return InvalidArgumentError("tensor {}: scale {} of channel {} is not a finite value >= 0",
                                  s.name, out[j], j);
    }
  }
  return scale;
}

Status CheckZeroPointIsZero(std::string_view name, const Tensor& zero_point) {
  const auto* bytes = static_cast<const uint8_t*>(zero_point.raw_data());
  if (!std::all_of(bytes, bytes + zero_point.nbytes(), [](uint8_t b) { return b == 0; })) {
    return UnimplementedError(
        "tensor {} holds non-zero zero points: asymmetric quantised weights are not loaded", name);
  }
  return absl::OkStatus();
}

StatusOr<Tensor> DecodeFp8Weight(std::string_view name, const Tensor& q, const Tensor& scales) {
  FZ_CHECK(q.dtype() == DType::kF8E4M3 && q.shape().size() == 2);
  FZ_CHECK(scales.dtype() == DType::kF32 && scales.shape() == Shape{q.dim(0)});
  const int64_t n = q.dim(0), k = q.dim(1);
  FZ_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({n, k}, DType::kBF16));
  const Float8E4M3* in = q.data<Float8E4M3>();
  BFloat16* dst = out.data<BFloat16>();
  for (int64_t row = 0; row < n; ++row) {
    const float s = scales.data<float>()[row];
    for (int64_t col = 0; col < k; ++col) {
      if ((in[row * k + col].bits & 0x7f) == 0x7f) {
        return InvalidArgumentError("tensor {} holds an FP8 NaN code at row {}, column {}", name,
                                    row, col);
      }
      // An E4M3 value has 4 significant bits and a bf16 scale (the usual) 8, so the f32
      // product is exact and only the rounding to bf16 remains.
      dst[row * k + col] = F32ToBF16(F8E4M3ToF32(in[row * k + col]) * s);
    }
  }
  return out;
}

}  // namespace framezip::engine::model
