#include "engine/ops/layer_norm.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckNormArgs("LayerNorm", x, gamma, "gamma", y));
  if (beta.defined()) {
    FZ_RETURN_IF_ERROR(CheckFloat("LayerNorm", "beta", beta));
    FZ_RETURN_IF_ERROR(CheckSameShape("LayerNorm", "beta", beta, "gamma", gamma));
    FZ_RETURN_IF_ERROR(CheckOnDevice("LayerNorm", x.device(), {&beta}));
  }
  switch (x.device().kind) {
    case DeviceKind::kCpu:
      return LayerNormCpu(x, gamma, beta, eps, y);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(x.device()));
      return LayerNormCuda(x, gamma, beta, eps, y);
  }
  return InternalError("LayerNorm: unknown device kind");
}

}  // namespace framezip::engine::ops
