#include "engine/ops/linear.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/linear_int8_cpu.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

namespace {

// The checks both overloads share: x, y and bias against weight [N, K] (any dtype), all on x's
// device.
Status CheckLinearArguments(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const Tensor& y) {
  constexpr std::string_view kOp = "Linear";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "x", x));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "weight", weight));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "y", y));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "x", x, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "y", y, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "weight", weight, 2));
  if (x.rank() < 1) return InvalidArgumentError("Linear: x must have rank >= 1");
  const int64_t n = weight.dim(0), k = weight.dim(1);
  if (x.dim(-1) != k) {
    return InvalidArgumentError("Linear: x has shape {} but weight has shape {} (in = {})",
                                ShapeString(x.shape()), ShapeString(weight.shape()), k);
  }
  Shape want = x.shape();
  want.back() = n;
  if (y.shape() != want) {
    return InvalidArgumentError("Linear: y has shape {}, want {}", ShapeString(y.shape()),
                                ShapeString(want));
  }
  if (bias.defined()) {
    FZ_RETURN_IF_ERROR(CheckFloat(kOp, "bias", bias));
    if (bias.shape() != Shape{n}) {
      return InvalidArgumentError("Linear: bias has shape {}, want [{}]", ShapeString(bias.shape()),
                                  n);
    }
  }
  if (x.raw_data() == y.raw_data()) return InvalidArgumentError("Linear: y must not alias x");
  return CheckOnDevice(kOp, x.device(), {&weight, &bias, &y});
}

}  // namespace

Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  if (weight.defined() && IsQuantizedWeightDType(weight.dtype())) {
    return InvalidArgumentError(
        "Linear: weight is {}; pass its per-channel scales (the Linear with weight_scale)",
        weight.dtype() == DType::kI8 ? "int8" : "FP8 E4M3");
  }
  FZ_RETURN_IF_ERROR(CheckLinearArguments(x, weight, bias, y));
  FZ_RETURN_IF_ERROR(CheckFloat("Linear", "weight", weight));
  switch (x.device().kind) {
    case DeviceKind::kCpu:
      return LinearCpu(x, weight, bias, y);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(x.device()));
      return LinearCuda(x, weight, bias, y);
  }
  return InternalError("Linear: unknown device kind");
}

Status Linear(const Tensor& x, const Tensor& weight, const Tensor& weight_scale, const Tensor& bias,
              Tensor& y) {
  if (!weight_scale.defined()) return Linear(x, weight, bias, y);
  constexpr std::string_view kOp = "Linear";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "weight", weight));
  const bool fp8 = weight.dtype() == DType::kF8E4M3;
  if (!fp8) FZ_RETURN_IF_ERROR(CheckDType(kOp, "weight", weight, DType::kI8));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "weight_scale", weight_scale, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckLinearArguments(x, weight, bias, y));
  if (weight_scale.shape() != Shape{weight.dim(0)}) {
    return InvalidArgumentError("Linear: weight_scale has shape {}, want [{}]",
                                ShapeString(weight_scale.shape()), weight.dim(0));
  }
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, x.device(), {&weight_scale}));
  if (fp8) {
    if (x.device().is_cpu()) {
      return UnimplementedError(
          "Linear: FP8 weights run on sm_90 GPUs only (the CPU has no FP8 arithmetic; use weight "
          "format int8 or bf16 there)");
    }
    FZ_RETURN_IF_ERROR(CheckDeviceUsable(x.device()));
    return LinearFp8Cuda(x, weight, weight_scale, bias, y);
  }
  if (!x.device().is_cpu()) {
    return UnimplementedError(
        "Linear: int8 weights run on the CPU only (on a GPU use weight format bf16)");
  }
  return LinearInt8Cpu(x, weight, weight_scale, bias, y);
}

bool Fp8LinearAvailable(Device device) {
  return device.kind == DeviceKind::kCuda && CheckDeviceUsable(device).ok() &&
         Fp8LinearAvailableCuda(device);
}

StatusOr<Tensor> PackLinearWeight(const Tensor& weight, const Tensor& weight_scale) {
  if (!weight.defined() || !weight.device().is_cpu() || weight.dtype() != DType::kI8) {
    PrepareLinearWeight(weight, weight_scale);
    return weight;
  }
  constexpr std::string_view kOp = "PackLinearWeight";
  if (weight.rank() != 2) {
    return InvalidArgumentError("{}: weight has shape {}, want [N, K]", kOp,
                                ShapeString(weight.shape()));
  }
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "weight_scale", weight_scale));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "weight_scale", weight_scale, DType::kF32));
  if (weight_scale.shape() != Shape{weight.dim(0)}) {
    return InvalidArgumentError("{}: weight_scale has shape {}, want [{}]", kOp,
                                ShapeString(weight_scale.shape()), weight.dim(0));
  }
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, weight.device(), {&weight_scale}));
  return PackedOnlyInt8Weight(weight, weight_scale);
}

Status MatMul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& c) {
  constexpr std::string_view kOp = "MatMul";
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"a", &a}, {"b", &b}, {"c", &c}}) {
    FZ_RETURN_IF_ERROR(CheckDefined(kOp, name, *t));
    if (t->rank() < 2) {
      return InvalidArgumentError("MatMul: {} has shape {}; want rank >= 2", name,
                                  ShapeString(t->shape()));
    }
  }
  FZ_RETURN_IF_ERROR(CheckFloat(kOp, "a", a));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "b", b, a.dtype()));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "c", c, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, a.device(), {&b, &c}));
  const int64_t m = a.dim(-2), k = a.dim(-1);
  const int64_t kb = transpose_b ? b.dim(-1) : b.dim(-2);
  const int64_t n = transpose_b ? b.dim(-2) : b.dim(-1);
  const Shape batch(a.shape().begin(), a.shape().end() - 2);
  const Shape b_batch(b.shape().begin(), b.shape().end() - 2);
  const Shape c_batch(c.shape().begin(), c.shape().end() - 2);
  if (kb != k || c.dim(-2) != m || c.dim(-1) != n || c_batch != batch ||
      (!b_batch.empty() && b_batch != batch)) {
    return InvalidArgumentError("MatMul: shapes a {} b {}{} c {} do not chain",
                                ShapeString(a.shape()), ShapeString(b.shape()),
                                transpose_b ? "ᵀ" : "", ShapeString(c.shape()));
  }
  if (c.raw_data() == a.raw_data() || c.raw_data() == b.raw_data()) {
    return InvalidArgumentError("MatMul: c must not alias a or b");
  }
  switch (a.device().kind) {
    case DeviceKind::kCpu:
      return MatMulCpu(a, b, transpose_b, c);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(a.device()));
      return MatMulCuda(a, b, transpose_b, c);
  }
  return InternalError("MatMul: unknown device kind");
}

}  // namespace framezip::engine::ops
