#include "engine/ops/quick_gelu.h"

#include "engine/ops/quick_gelu_backends.h"

namespace framezip::engine::ops {

Status QuickGelu(const Tensor& x, Tensor& y) {
  if (x.shape() != y.shape()) {
    return InvalidArgumentError("QuickGelu: shapes differ, x {} vs y {}", ShapeString(x.shape()),
                                ShapeString(y.shape()));
  }
  if (x.dtype() != DType::kF32 || y.dtype() != DType::kF32) {
    return InvalidArgumentError("QuickGelu: x and y must be f32, not {} and {}",
                                DTypeName(x.dtype()), DTypeName(y.dtype()));
  }
  if (x.device() != y.device()) {
    return InvalidArgumentError("QuickGelu: devices differ, {} vs {}", DeviceName(x.device()),
                                DeviceName(y.device()));
  }
  switch (x.device().kind) {
    case DeviceKind::kCpu:
      return QuickGeluCpu(x, y);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(x.device()));
      return QuickGeluCuda(x, y);
  }
  return InternalError("QuickGelu: unknown device kind");
}

}  // namespace framezip::engine::ops
