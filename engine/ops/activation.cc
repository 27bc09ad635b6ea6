#include "engine/ops/activation.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {
namespace {

Status CheckElementwise(std::string_view op, const Tensor& a, const Tensor* b, const Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckDefined(op, "input", a));
  FZ_RETURN_IF_ERROR(CheckDefined(op, "output", y));
  FZ_RETURN_IF_ERROR(CheckDType(op, "input", a, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(op, "output", y, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckSameShape(op, "input", a, "output", y));
  FZ_RETURN_IF_ERROR(CheckOnDevice(op, a.device(), {&y}));
  if (b != nullptr) {
    FZ_RETURN_IF_ERROR(CheckDefined(op, "second input", *b));
    FZ_RETURN_IF_ERROR(CheckDType(op, "second input", *b, DType::kF32));
    FZ_RETURN_IF_ERROR(CheckSameShape(op, "first input", a, "second input", *b));
    FZ_RETURN_IF_ERROR(CheckOnDevice(op, a.device(), {b}));
  }
  return absl::OkStatus();
}

}  // namespace

Status Gelu(const Tensor& x, GeluApproximation approximation, Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckElementwise("Gelu", x, nullptr, y));
  switch (x.device().kind) {
    case DeviceKind::kCpu:
      return GeluCpu(x, approximation, y);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(x.device()));
      return GeluCuda(x, approximation, y);
  }
  return InternalError("Gelu: unknown device kind");
}

Status SiluMul(const Tensor& gate, const Tensor& up, Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckElementwise("SiluMul", gate, &up, y));
  switch (gate.device().kind) {
    case DeviceKind::kCpu:
      return SiluMulCpu(gate, up, y);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(gate.device()));
      return SiluMulCuda(gate, up, y);
  }
  return InternalError("SiluMul: unknown device kind");
}

Status SiluMulHalves(const Tensor& gate_up, Tensor& y) {
  constexpr std::string_view kOp = "SiluMulHalves";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "gate_up", gate_up));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "output", y));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "gate_up", gate_up, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "output", y, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "gate_up", gate_up, 2));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "output", y, 2));
  if (y.dim(0) != gate_up.dim(0) || gate_up.dim(1) != 2 * y.dim(1)) {
    return InvalidArgumentError("SiluMulHalves: gate_up {} is not [rows, 2·w] of output {}",
                                ShapeString(gate_up.shape()), ShapeString(y.shape()));
  }
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, gate_up.device(), {&y}));
  // Rows are read and written at different strides: an output inside the input would overwrite
  // gates and ups before they are read.
  const auto* in = static_cast<const char*>(gate_up.raw_data());
  const auto* out = static_cast<const char*>(y.raw_data());
  if (out < in + gate_up.nbytes() && in < out + y.nbytes()) {
    return InvalidArgumentError("SiluMulHalves: the output overlaps gate_up");
  }
  switch (y.device().kind) {
    case DeviceKind::kCpu:
      return SiluMulHalvesCpu(gate_up, y);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(y.device()));
      return SiluMulHalvesCuda(gate_up, y);
  }
  return InternalError("SiluMulHalves: unknown device kind");
}

Status Add(const Tensor& a, const Tensor& b, Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckElementwise("Add", a, &b, y));
  switch (a.device().kind) {
    case DeviceKind::kCpu:
      return AddCpu(a, b, y);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(a.device()));
      return AddCuda(a, b, y);
  }
  return InternalError("Add: unknown device kind");
}

}  // namespace framezip::engine::ops
