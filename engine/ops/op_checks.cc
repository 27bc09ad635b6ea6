#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status CheckNormArgs(std::string_view op, const Tensor& x, const Tensor& param,
                     std::string_view param_name, const Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckDefined(op, "x", x));
  FZ_RETURN_IF_ERROR(CheckDefined(op, param_name, param));
  FZ_RETURN_IF_ERROR(CheckDefined(op, "y", y));
  FZ_RETURN_IF_ERROR(CheckDType(op, "x", x, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(op, "y", y, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckFloat(op, param_name, param));
  FZ_RETURN_IF_ERROR(CheckSameShape(op, "x", x, "y", y));
  if (x.rank() < 1 || param.shape() != Shape{x.dim(-1)}) {
    return InvalidArgumentError("{}: {} has shape {}, want [{}] for x of shape {}", op, param_name,
                                ShapeString(param.shape()), x.rank() < 1 ? 0 : x.dim(-1),
                                ShapeString(x.shape()));
  }
  return CheckOnDevice(op, x.device(), {&param, &y});
}

}  // namespace framezip::engine::ops
