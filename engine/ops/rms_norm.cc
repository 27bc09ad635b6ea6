#include "engine/ops/rms_norm.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckNormArgs("RmsNorm", x, weight, "weight", y));
  switch (x.device().kind) {
    case DeviceKind::kCpu:
      return RmsNormCpu(x, weight, eps, y);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(x.device()));
      return RmsNormCuda(x, weight, eps, y);
  }
  return InternalError("RmsNorm: unknown device kind");
}

Status AddRmsNorm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  constexpr std::string_view kOp = "AddRmsNorm";
  FZ_RETURN_IF_ERROR(CheckNormArgs(kOp, residual, weight, "weight", y));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "x", x));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "x", x, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckSameShape(kOp, "residual", residual, "x", x));
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, residual.device(), {&x}));
  if (y.raw_data() == residual.raw_data()) {
    return InvalidArgumentError("AddRmsNorm: y must not alias residual (it keeps the sum)");
  }
  switch (residual.device().kind) {
    case DeviceKind::kCpu:
      FZ_RETURN_IF_ERROR(AddCpu(residual, x, residual));
      return RmsNormCpu(residual, weight, eps, y);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(residual.device()));
      return AddRmsNormCuda(residual, x, weight, eps, y);
  }
  return InternalError("AddRmsNorm: unknown device kind");
}

}  // namespace framezip::engine::ops
