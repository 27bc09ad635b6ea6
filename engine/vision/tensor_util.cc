#include "engine/vision/tensor_util.h"

#include "engine/core/half.h"

namespace framezip::engine::vision {

float LoadAsF32(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return static_cast<const float*>(t.raw_data())[i];
    case DType::kBF16:
      return BF16ToF32(static_cast<const BFloat16*>(t.raw_data())[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const Float16*>(t.raw_data())[i]);
    default:
      FZ_CHECK(false && "LoadAsF32: weights are checked to be float at bind time");
  }
  return 0.0f;
}

std::vector<float> ToF32(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = LoadAsF32(t, i);
  return v;
}

StatusOr<Tensor> NewF32(Shape shape, const char* what, Device device) {
  StatusOr<Tensor> t = Tensor::Empty(std::move(shape), DType::kF32, device);
  if (!t.ok()) return Annotate(t.status(), fmt::format("vision: allocating {}", what));
  return t;
}

}  // namespace framezip::engine::vision
