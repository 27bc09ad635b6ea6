#include "engine/ops/bilinear_resize.h"

#include <initializer_list>

#include "engine/ops/bilinear_resize_backends.h"
#include "engine/ops/cuda_backends.h"

namespace framezip::engine::ops {
namespace {
bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
}  // namespace

Status BilinearResize(const Tensor& in, Tensor& out, ImageLayout layout) {
  if (in.rank() != 4 || out.rank() != 4) {
    return InvalidArgumentError("BilinearResize: in {} and out {} must both be rank 4",
                                ShapeString(in.shape()), ShapeString(out.shape()));
  }
  const int c_axis = layout == ImageLayout::kChannelsFirst ? 1 : 3;
  if (in.dim(0) != out.dim(0) || in.dim(c_axis) != out.dim(c_axis)) {
    return InvalidArgumentError(
        "BilinearResize: batch or channel sizes differ, in {} vs out {} ({})",
        ShapeString(in.shape()), ShapeString(out.shape()),
        layout == ImageLayout::kChannelsFirst ? "NCHW" : "NHWC");
  }
  for (const Tensor* t : {&in, static_cast<const Tensor*>(&out)}) {
    for (int64_t d : t->shape()) {
      if (d <= 0) {
        return InvalidArgumentError("BilinearResize: empty dimension in {}",
                                    ShapeString(t->shape()));
      }
    }
  }
  if (in.dtype() != out.dtype() || !IsFloat(in.dtype())) {
    return InvalidArgumentError("BilinearResize: in and out must share a float dtype, not {} -> {}",
                                DTypeName(in.dtype()), DTypeName(out.dtype()));
  }
  if (in.device() != out.device()) {
    return InvalidArgumentError("BilinearResize: devices differ, {} vs {}", DeviceName(in.device()),
                                DeviceName(out.device()));
  }
  switch (in.device().kind) {
    case DeviceKind::kCpu:
      return BilinearResizeCpu(in, out, layout);
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(in.device()));
      return BilinearResizeCuda(in, out, layout);
  }
  return InternalError("BilinearResize: unknown device kind");
}

}  // namespace framezip::engine::ops
