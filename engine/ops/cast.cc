#include "engine/ops/cast.h"

#include "engine/ops/cast_backends.h"
#include "engine/ops/row_slices.h"

namespace framezip::engine::ops {
namespace {
bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
}  // namespace

Status Cast(const Tensor& in, Tensor& out) {
  if (in.shape() != out.shape()) {
    return absl::InvalidArgumentError(fmt::format(
        "Cast: shapes differ, {} vs {}", ShapeString(in.shape()), ShapeString(out.shape())));
  }
  if (in.device() != out.device()) {
    return absl::InvalidArgumentError(fmt::format(
        "Cast: devices differ, {} vs {}", DeviceName(in.device()), DeviceName(out.device())));
  }
  if (!IsFloat(in.dtype()) || !IsFloat(out.dtype())) {
    return absl::InvalidArgumentError(fmt::format("Cast: only f32/f16/bf16, not {} -> {}",
                                                  DTypeName(in.dtype()), DTypeName(out.dtype())));
  }
  switch (in.device().kind) {
    case DeviceKind::kCpu:
      return CastCpu(in, out);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(in.device()));
      return CastCuda(in, out);
  }
  return absl::InternalError("Cast: unknown device kind");
}

Status ConvertElements(Device device, const void* src, DType from, void* dst, DType to,
                       int64_t count) {
  if (count < 0) return InvalidArgumentError("ConvertElements: {} elements", count);
  if (count == 0) return absl::OkStatus();
  if (from == DType::kF32 && to == DType::kF32) {
    return CopyRowSlices(device, 1, count,
                         {.data = static_cast<const float*>(src), .stride = count},
                         {.data = static_cast<float*>(dst), .stride = count});
  }
  const Tensor in = Tensor::View(const_cast<void*>(src), {count}, from, device);
  Tensor out = Tensor::View(dst, {count}, to, device);
  return Cast(in, out);
}

}  // namespace framezip::engine::ops
