#include "engine/ops/layer_norm.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y) {
  FZ_RETURN_IF_ERROR(CheckNormArgs("LayerNorm", x, gamma, "gamma", y));
  if (beta.defined()) {
    FZ_RETURN_IF_ERROR(CheckFloat("LayerNorm", "beta", beta));
    FZ_RETURN_IF_ERROR(CheckSameShape("LayerNorm", "beta", beta, "gamma", gamma));
    FZ_RETURN_IF_ERROR(CheckCpu("LayerNorm", beta));
  }
  return LayerNormCpu(x, gamma, beta, eps, y);
}

}  // namespace framezip::engine::ops
