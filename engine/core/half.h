// 16-bit float storage types (IEEE binary16 and bfloat16) with exact conversions to and from f32.
// Arithmetic is always done in f32; these types only store.
#pragma once

#include <bit>
#include <cstdint>

#include "engine/core/dtype.h"

namespace framezip::engine {

struct BFloat16 {
  uint16_t bits = 0;
};
struct Float16 {
  uint16_t bits = 0;
};

template <>
struct DTypeOf<BFloat16> {
  static constexpr DType kValue = DType::kBF16;
};
template <>
struct DTypeOf<Float16> {
  static constexpr DType kValue = DType::kF16;
};

inline float BF16ToF32(BFloat16 v) { return std::bit_cast<float>(uint32_t{v.bits} << 16); }

// Round to nearest even, as torch does; NaN stays NaN.
inline BFloat16 F32ToBF16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

float F16ToF32(Float16 v);
Float16 F32ToF16(float f);  // round to nearest even, overflow to inf

// x rounded to a 16-bit type's precision and back (bf16, f16); any other dtype leaves it as is.
// What a GEMM over 16-bit operands sees of an f32 input.
inline float RoundedThrough(DType dtype, float x) {
  if (dtype == DType::kBF16) return BF16ToF32(F32ToBF16(x));
  if (dtype == DType::kF16) return F16ToF32(F32ToF16(x));
  return x;
}

}  // namespace framezip::engine
