#include "engine/ops/rms_norm.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status RmsNorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckNormArgs("RmsNorm", x, weight, "weight", y));
  return RmsNormCpu(x, weight, eps, y);
}

}  // namespace framezip::engine::ops
