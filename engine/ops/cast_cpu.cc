#include <cstring>

#include "engine/core/half.h"
#include "engine/ops/cast_backends.h"

namespace framezip::engine::ops {
namespace {

float Load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kF16:
      return F16ToF32(static_cast<const Float16*>(p)[i]);
    case DType::kBF16:
      return BF16ToF32(static_cast<const BFloat16*>(p)[i]);
    default:
      return 0.f;  // rejected by Cast()
  }
}

void Store(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(p)[i] = v;
      break;
    case DType::kF16:
      static_cast<Float16*>(p)[i] = F32ToF16(v);
      break;
    case DType::kBF16:
      static_cast<BFloat16*>(p)[i] = F32ToBF16(v);
      break;
    default:
      break;  // rejected by Cast()
  }
}

}  // namespace

Status CastCpu(const Tensor& in, Tensor& out) {
  const int64_t n = in.numel();
  if (in.dtype() == out.dtype()) {
    std::memmove(out.raw_data(), in.raw_data(), in.nbytes());
    return absl::OkStatus();
  }
  const void* src = in.raw_data();
  void* dst = out.raw_data();
  for (int64_t i = 0; i < n; ++i) Store(dst, out.dtype(), i, Load(src, in.dtype(), i));
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
