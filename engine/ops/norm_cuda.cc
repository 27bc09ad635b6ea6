// RmsNorm (alone or fused with the residual add), LayerNorm and Softmax on the GPU: adapters to
// engine/kernels/cuda/norm.cuh.
#include "engine/kernels/cuda/norm.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {
namespace {

cuda::NormParams Params(const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  cuda::NormParams p;
  p.x = static_cast<const float*>(x.raw_data());
  p.y = static_cast<float*>(y.raw_data());
  p.weight = weight.raw_data();
  p.weight_kind = KindOf(weight.dtype());
  p.d = x.dim(-1);
  p.rows = p.d == 0 ? 0 : x.numel() / p.d;
  p.eps = eps;
  return p;
}

}  // namespace

Status RmsNormCuda(const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  ScopedCudaDevice scope(x.device());
  return LaunchStatus(cuda::LaunchRmsNorm(Params(x, weight, eps, y), CurrentFramezipStream()),
                      "RmsNorm");
}

Status AddRmsNormCuda(Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                      Tensor& y) {
  ScopedCudaDevice scope(residual.device());
  cuda::NormParams p = Params(x, weight, eps, y);
  p.residual = static_cast<float*>(residual.raw_data());
  return LaunchStatus(cuda::LaunchRmsNorm(p, CurrentFramezipStream()), "AddRmsNorm");
}

Status LayerNormCuda(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                     Tensor& y) {
  ScopedCudaDevice scope(x.device());
  cuda::NormParams p = Params(x, gamma, eps, y);
  if (beta.defined()) {
    p.bias = beta.raw_data();
    p.bias_kind = KindOf(beta.dtype());
  }
  return LaunchStatus(cuda::LaunchLayerNorm(p, CurrentFramezipStream()), "LayerNorm");
}

Status SoftmaxCuda(const Tensor& x, Tensor& y) {
  ScopedCudaDevice scope(x.device());
  cuda::SoftmaxParams p;
  p.x = static_cast<const float*>(x.raw_data());
  p.y = static_cast<float*>(y.raw_data());
  p.n = x.dim(-1);
  p.rows = p.n == 0 ? 0 : x.numel() / p.n;
  return LaunchStatus(cuda::LaunchSoftmax(p, CurrentFramezipStream()), "Softmax");
}

}  // namespace framezip::engine::ops
