// Argument checks shared by the ops' dispatchers (x.cc files). Each returns INVALID_ARGUMENT with
// a message naming the op and the tensor, so a caller's bug reads as "Linear: weight has shape
// [4, 3], want [N, 8]" rather than a crash.
#pragma once

#include <initializer_list>
#include <string_view>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

inline bool IsFloatDType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

inline Status CheckDefined(std::string_view op, std::string_view name, const Tensor& t) {
  if (!t.defined() && t.numel() != 0) return InvalidArgumentError("{}: {} is empty", op, name);
  return absl::OkStatus();
}

inline Status CheckDType(std::string_view op, std::string_view name, const Tensor& t, DType want) {
  if (t.dtype() != want) {
    return InvalidArgumentError("{}: {} has dtype {}, want {}", op, name, DTypeName(t.dtype()),
                                DTypeName(want));
  }
  return absl::OkStatus();
}

inline Status CheckFloat(std::string_view op, std::string_view name, const Tensor& t) {
  if (!IsFloatDType(t.dtype())) {
    return InvalidArgumentError("{}: {} has dtype {}, want f32, bf16 or f16", op, name,
                                DTypeName(t.dtype()));
  }
  return absl::OkStatus();
}

inline Status CheckRank(std::string_view op, std::string_view name, const Tensor& t, int rank) {
  if (t.rank() != rank) {
    return InvalidArgumentError("{}: {} has shape {}, want rank {}", op, name,
                                ShapeString(t.shape()), rank);
  }
  return absl::OkStatus();
}

inline Status CheckSameShape(std::string_view op, std::string_view a_name, const Tensor& a,
                             std::string_view b_name, const Tensor& b) {
  if (a.shape() != b.shape()) {
    return InvalidArgumentError("{}: {} has shape {} but {} has shape {}", op, a_name,
                                ShapeString(a.shape()), b_name, ShapeString(b.shape()));
  }
  return absl::OkStatus();
}

inline Status CheckShape(std::string_view op, std::string_view name, const Tensor& t,
                         const Shape& want) {
  if (t.shape() != want) {
    return InvalidArgumentError("{}: {} has shape {}, want {}", op, name, ShapeString(t.shape()),
                                ShapeString(want));
  }
  return absl::OkStatus();
}

// OK when every defined tensor in `tensors` lives on `device`: ops never move data between
// devices, the caller does (Tensor::To).
inline Status CheckOnDevice(std::string_view op, Device device,
                            std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined() && t->device() != device) {
      return InvalidArgumentError("{}: tensors on {} and {}; all must be on one device", op,
                                  DeviceName(device), DeviceName(t->device()));
    }
  }
  return absl::OkStatus();
}

// A model weight against the shape the config implies: INVALID_ARGUMENT "<who>: missing tensor
// <name>" (unless optional) or "<who>: <name> has shape [..], expected [..]".
inline Status CheckWeightShape(std::string_view who, const Tensor& t, const Shape& want,
                               std::string_view name, bool optional) {
  if (!t.defined()) {
    if (optional) return absl::OkStatus();
    return InvalidArgumentError("{}: missing tensor {}", who, name);
  }
  if (t.shape() != want) {
    return InvalidArgumentError("{}: {} has shape {}, expected {}", who, name,
                                ShapeString(t.shape()), ShapeString(want));
  }
  return absl::OkStatus();
}

// x [..., D] f32, y like x, `param` [D] f32/bf16/f16 (LayerNorm's gamma, RmsNorm's weight).
Status CheckNormArgs(std::string_view op, const Tensor& x, const Tensor& param,
                     std::string_view param_name, const Tensor& y);

}  // namespace framezip::engine::ops
