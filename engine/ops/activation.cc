#include "engine/ops/activation.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {
namespace {

Status CheckElementwise(std::string_view op, const Tensor& a, const Tensor* b, const Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckDefined(op, "input", a));
  FZ_RETURN_IF_ERROR(CheckDefined(op, "output", y));
  FZ_RETURN_IF_ERROR(CheckDType(op, "input", a, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(op, "output", y, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckSameShape(op, "input", a, "output", y));
  FZ_RETURN_IF_ERROR(CheckCpu(op, a));
  FZ_RETURN_IF_ERROR(CheckCpu(op, y));
  if (b != nullptr) {
    FZ_RETURN_IF_ERROR(CheckDefined(op, "second input", *b));
    FZ_RETURN_IF_ERROR(CheckDType(op, "second input", *b, DType::kF32));
    FZ_RETURN_IF_ERROR(CheckSameShape(op, "first input", a, "second input", *b));
    FZ_RETURN_IF_ERROR(CheckCpu(op, *b));
  }
  return absl::OkStatus();
}

}  // namespace

Status Gelu(const Tensor& x, GeluApproximation approximation, Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckElementwise("Gelu", x, nullptr, y));
  return GeluCpu(x, approximation, y);
}

Status SiluMul(const Tensor& gate, const Tensor& up, Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckElementwise("SiluMul", gate, &up, y));
  return SiluMulCpu(gate, up, y);
}

Status Add(const Tensor& a, const Tensor& b, Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckElementwise("Add", a, &b, y));
  return AddCpu(a, b, y);
}

}  // namespace framezip::engine::ops
