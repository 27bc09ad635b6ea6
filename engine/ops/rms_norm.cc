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

}  // namespace framezip::engine::ops
