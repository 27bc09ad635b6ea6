#include "engine/core/half.h"

namespace framezip::engine {

float F16ToF32(Float16 v) {
  const uint32_t sign = uint32_t{v.bits & 0x8000u} << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fu;
  uint32_t mant = v.bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      out = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

Float16 F32ToF16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return Float16{static_cast<uint16_t>(sign | 0x7e00u)};   // NaN
  if (abs >= 0x477ff000u) return Float16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow
  if (abs < 0x38800000u) {  // result is subnormal or zero
    // Shift the mantissa (with its implicit one) into place and round to nearest even.
    const int32_t e = static_cast<int32_t>(abs >> 23);
    if (e < 102) return Float16{static_cast<uint16_t>(sign)};
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - e;  // 14 .. 24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return Float16{static_cast<uint16_t>(sign | half)};
  }
  uint32_t half = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return Float16{static_cast<uint16_t>(sign | half)};
}

}  // namespace framezip::engine
