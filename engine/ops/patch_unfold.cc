#include "engine/ops/patch_unfold.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status UnfoldPatches(const Tensor& pixels, int64_t patch, DType round_to, Tensor& cols) {
  constexpr std::string_view kOp = "UnfoldPatches";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "pixels", pixels));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "cols", cols));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "pixels", pixels, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "cols", cols, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "pixels", pixels, 4));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "cols", cols, 2));
  if (round_to != DType::kF32 && round_to != DType::kBF16 && round_to != DType::kF16) {
    return InvalidArgumentError("UnfoldPatches: round_to must be f32, bf16 or f16, not {}",
                                DTypeName(round_to));
  }
  const int64_t b = pixels.dim(0), c = pixels.dim(1), s = pixels.dim(2);
  if (patch <= 0 || pixels.dim(3) != s || s < patch) {
    return InvalidArgumentError(
        "UnfoldPatches: pixels {} are not square images of at least one patch of {}",
        ShapeString(pixels.shape()), patch);
  }
  const int64_t g = s / patch;
  if (cols.shape() != Shape{b * g * g, c * patch * patch}) {
    return InvalidArgumentError("UnfoldPatches: cols {}, want [{}, {}] for pixels {} and patch {}",
                                ShapeString(cols.shape()), b * g * g, c * patch * patch,
                                ShapeString(pixels.shape()), patch);
  }
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, pixels.device(), {&cols}));
  switch (pixels.device().kind) {
    case DeviceKind::kCpu:
      return UnfoldPatchesCpu(pixels, patch, round_to, cols);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(pixels.device()));
      return UnfoldPatchesCuda(pixels, patch, round_to, cols);
  }
  return InternalError("UnfoldPatches: unknown device kind");
}

}  // namespace framezip::engine::ops
