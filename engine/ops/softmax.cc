#include "engine/ops/softmax.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status Softmax(const Tensor& x, Tensor& y) {
  constexpr std::string_view kOp = "Softmax";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "x", x));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "y", y));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "x", x, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "y", y, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckSameShape(kOp, "x", x, "y", y));
  if (x.rank() < 1) return InvalidArgumentError("Softmax: x must have rank >= 1");
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, x.device(), {&y}));
  switch (x.device().kind) {
    case DeviceKind::kCpu:
      return SoftmaxCpu(x, y);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(x.device()));
      return SoftmaxCuda(x, y);
  }
  return InternalError("Softmax: unknown device kind");
}

}  // namespace framezip::engine::ops
