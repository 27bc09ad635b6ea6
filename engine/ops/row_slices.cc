#include "engine/ops/row_slices.h"

#include <cstring>

#include "engine/ops/cuda_backends.h"

namespace framezip::engine::ops {
namespace {

Status CheckRows(std::string_view which, std::span<const int32_t> rows, int64_t count,
                 int64_t stride, int64_t col0, int64_t width) {
  if (!rows.empty() && static_cast<int64_t>(rows.size()) != count) {
    return InvalidArgumentError("CopyRowSlices: {} has {} row indices for {} rows", which,
                                rows.size(), count);
  }
  for (int32_t r : rows) {
    if (r < 0) return InvalidArgumentError("CopyRowSlices: {} row index {} < 0", which, r);
  }
  if (col0 < 0 || col0 + width > stride) {
    return InvalidArgumentError("CopyRowSlices: {} columns [{}, {}) outside rows of {}", which,
                                col0, col0 + width, stride);
  }
  return absl::OkStatus();
}

void CopyRowSlicesCpu(int64_t count, int64_t width, const SourceRows& src,
                      const DestinationRows& dst) {
  const size_t bytes = static_cast<size_t>(width) * sizeof(float);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t from = src.rows.empty() ? i : src.rows[static_cast<size_t>(i)];
    const int64_t to = dst.rows.empty() ? i : dst.rows[static_cast<size_t>(i)];
    std::memcpy(dst.data + to * dst.stride + dst.col0, src.data + from * src.stride + src.col0,
                bytes);
  }
}

}  // namespace

Status CopyRowSlices(Device device, int64_t count, int64_t width, const SourceRows& src,
                     const DestinationRows& dst) {
  if (count < 0 || width < 0) {
    return InvalidArgumentError("CopyRowSlices: {} rows of {} floats", count, width);
  }
  FZ_RETURN_IF_ERROR(CheckRows("source", src.rows, count, src.stride, src.col0, width));
  FZ_RETURN_IF_ERROR(CheckRows("destination", dst.rows, count, dst.stride, dst.col0, width));
  if (count == 0 || width == 0) return absl::OkStatus();
  switch (device.kind) {
    case DeviceKind::kCpu:
      CopyRowSlicesCpu(count, width, src, dst);
      return absl::OkStatus();
    case DeviceKind::kCuda:
      FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
      return CopyRowSlicesCuda(device, count, width, src, dst);
  }
  return InternalError("CopyRowSlices: unknown device kind");
}

}  // namespace framezip::engine::ops
