// Gelu, QuickGelu, SiluMul and Add on the GPU: adapters to engine/kernels/cuda/elementwise.cuh.
#include "engine/kernels/cuda/elementwise.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"
#include "engine/ops/quick_gelu_backends.h"

namespace framezip::engine::ops {
namespace {

cuda::BinaryParams Binary(const Tensor& a, const Tensor& b, Tensor& y) {
  cuda::BinaryParams p;
  p.a = static_cast<const float*>(a.raw_data());
  p.b = static_cast<const float*>(b.raw_data());
  p.y = static_cast<float*>(y.raw_data());
  p.n = y.numel();
  return p;
}

}  // namespace

Status GeluCuda(const Tensor& x, GeluApproximation approximation, Tensor& y) {
  ScopedCudaDevice scope(x.device());
  cuda::GeluParams p;
  p.x = static_cast<const float*>(x.raw_data());
  p.y = static_cast<float*>(y.raw_data());
  p.n = y.numel();
  p.form = approximation == GeluApproximation::kErf ? cuda::GeluForm::kErf : cuda::GeluForm::kTanh;
  return LaunchStatus(cuda::LaunchGelu(p, CurrentFramezipStream()), "Gelu");
}

Status QuickGeluCuda(const Tensor& x, Tensor& y) {
  ScopedCudaDevice scope(x.device());
  cuda::GeluParams p;
  p.x = static_cast<const float*>(x.raw_data());
  p.y = static_cast<float*>(y.raw_data());
  p.n = y.numel();
  p.form = cuda::GeluForm::kQuick;
  return LaunchStatus(cuda::LaunchGelu(p, CurrentFramezipStream()), "QuickGelu");
}

Status SiluMulCuda(const Tensor& gate, const Tensor& up, Tensor& y) {
  ScopedCudaDevice scope(gate.device());
  return LaunchStatus(cuda::LaunchSiluMul(Binary(gate, up, y), CurrentFramezipStream()), "SiluMul");
}

Status SiluMulHalvesCuda(const Tensor& gate_up, Tensor& y) {
  ScopedCudaDevice scope(y.device());
  cuda::SiluMulHalvesParams p;
  p.in = static_cast<const float*>(gate_up.raw_data());
  p.y = static_cast<float*>(y.raw_data());
  p.rows = y.dim(0);
  p.width = y.dim(1);
  return LaunchStatus(cuda::LaunchSiluMulHalves(p, CurrentFramezipStream()), "SiluMulHalves");
}

Status AddCuda(const Tensor& a, const Tensor& b, Tensor& y) {
  ScopedCudaDevice scope(a.device());
  return LaunchStatus(cuda::LaunchAdd(Binary(a, b, y), CurrentFramezipStream()), "Add");
}

}  // namespace framezip::engine::ops
