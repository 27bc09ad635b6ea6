#include "engine/core/tensor.h"

#include <cstring>

#include "engine/core/device_memory.h"
#include "fmt/ranges.h"

namespace framezip::engine {

std::string ShapeString(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
Status CheckShape(const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0)
      return absl::InvalidArgumentError(
          fmt::format("negative dimension in {}", ShapeString(shape)));
  }
  return absl::OkStatus();
}
}  // namespace

StatusOr<Tensor> Tensor::Empty(Shape shape, DType dtype, Device device) {
  FZ_RETURN_IF_ERROR(CheckShape(shape));
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  FZ_ASSIGN_OR_RETURN(t.buffer_, Buffer::Allocate(device, t.nbytes()));
  return t;
}

StatusOr<Tensor> Tensor::Zeros(Shape shape, DType dtype, Device device) {
  FZ_ASSIGN_OR_RETURN(Tensor t, Empty(std::move(shape), dtype, device));
  FZ_RETURN_IF_ERROR(ZeroBytes(t.raw_data(), device, t.nbytes()));
  return t;
}

Tensor Tensor::View(void* data, Shape shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.buffer_ = Buffer::View(data, t.nbytes(), device);
  return t;
}

StatusOr<Tensor> Tensor::FromBuffer(Buffer buffer, size_t offset, Shape shape, DType dtype) {
  FZ_RETURN_IF_ERROR(CheckShape(shape));
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  if (offset > buffer.bytes() || t.nbytes() > buffer.bytes() - offset) {
    return absl::OutOfRangeError(
        fmt::format("tensor {} {} at offset {} exceeds a buffer of {} bytes", ShapeString(t.shape_),
                    DTypeName(dtype), offset, buffer.bytes()));
  }
  t.buffer_ = std::move(buffer);
  t.offset_ = offset;
  return t;
}

StatusOr<Tensor> Tensor::Slice(int64_t begin, int64_t end) const {
  if (rank() == 0 || begin < 0 || end < begin || end > shape_[0]) {
    return absl::OutOfRangeError(
        fmt::format("slice [{}, {}) of {}", begin, end, ShapeString(shape_)));
  }
  Tensor t = *this;
  const size_t row_bytes = shape_[0] == 0 ? 0 : nbytes() / static_cast<size_t>(shape_[0]);
  t.offset_ += static_cast<size_t>(begin) * row_bytes;
  t.shape_[0] = end - begin;
  return t;
}

StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  if (NumElements(shape) != numel()) {
    return absl::InvalidArgumentError(
        fmt::format("cannot reshape {} to {}", ShapeString(shape_), ShapeString(shape)));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

StatusOr<Tensor> Tensor::To(Device device) const {
  FZ_ASSIGN_OR_RETURN(Tensor out, Empty(shape_, dtype_, device));
  FZ_RETURN_IF_ERROR(CopyBytes(out.raw_data(), device, raw_data(), this->device(), nbytes()));
  return out;
}

}  // namespace framezip::engine
