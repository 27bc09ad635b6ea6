// Tensor: a Buffer plus dtype, shape and a byte offset. Tensors are row-major and contiguous
// (ops that need other layouts take explicit strides in their Params). Copies are cheap and share
// the buffer; Slice/Reshape never allocate.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/core/buffer.h"
#include "engine/core/dtype.h"

namespace framezip::engine {

using Shape = std::vector<int64_t>;

std::string ShapeString(const Shape& shape);  // "[2, 3, 4]"
int64_t NumElements(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Allocates an uninitialised tensor.
  static StatusOr<Tensor> Empty(Shape shape, DType dtype, Device device = Device::Cpu());
  // Allocates and zero-fills (on a GPU: a memset queued on framezip's stream of the device).
  static StatusOr<Tensor> Zeros(Shape shape, DType dtype, Device device = Device::Cpu());
  // Wraps memory owned elsewhere (mmapped weights); `data` must outlive every copy.
  static Tensor View(void* data, Shape shape, DType dtype, Device device = Device::Cpu());
  // A tensor over `buffer` starting at byte `offset`.
  static StatusOr<Tensor> FromBuffer(Buffer buffer, size_t offset, Shape shape, DType dtype);

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return buffer_.device(); }
  bool defined() const { return !buffer_.empty(); }
  const Buffer& buffer() const { return buffer_; }

  void* raw_data() const { return static_cast<char*>(buffer_.data()) + offset_; }

  // Typed pointer; FZ_CHECKs the dtype (a wrong type here is a programming error).
  template <typename T>
  T* data() const {
    FZ_CHECK(DTypeOf<T>::kValue == dtype_);
    return static_cast<T*>(raw_data());
  }

  // Rows [begin, end) of dimension 0, sharing the buffer.
  StatusOr<Tensor> Slice(int64_t begin, int64_t end) const;
  // Same elements, another shape (element counts must match).
  StatusOr<Tensor> Reshape(Shape shape) const;
  // Deep copy to `device` (or the same device).
  StatusOr<Tensor> To(Device device) const;

 private:
  Buffer buffer_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
};

}  // namespace framezip::engine
