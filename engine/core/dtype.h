// Element types of engine tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace framezip::engine {

// kF8E4M3: FP8 E4M3 (engine/core/float8.h), stored only: weights of FP8 checkpoints and of
// --weight-format fp8.
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kI8, kF8E4M3 };

// The dtypes of a Linear weight that carries per-output-channel scales (ops/quantize_int8.h,
// ops/quantize_fp8.h).
constexpr bool IsQuantizedWeightDType(DType t) { return t == DType::kI8 || t == DType::kF8E4M3; }

// Bytes per element.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
    case DType::kI8:
      return 1;
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
    case DType::kI8:
      return "i8";
    case DType::kF8E4M3:
      return "f8e4m3";
  }
  return "?";
}

// C++ type -> DType, for Tensor::data<T>() checks.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType kValue = DType::kF32;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType kValue = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType kValue = DType::kI64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType kValue = DType::kU8;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType kValue = DType::kI8;
};

}  // namespace framezip::engine
