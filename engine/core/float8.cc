#include "engine/core/float8.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>

namespace framezip::engine {
namespace {

// All 256 values, computed once: a weight load decodes hundreds of millions of them.
std::array<float, 256> DecodeTable() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) {
    const int exponent = (code >> 3) & 0xf;
    const int mantissa = code & 0x7;
    float magnitude;
    if (exponent == 0xf && mantissa == 0x7) {
      magnitude = std::numeric_limits<float>::quiet_NaN();
    } else if (exponent == 0) {
      magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 · 2^-6
    } else {
      magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 7 - 3);
    }
    table[code] = (code & 0x80) != 0 ? -magnitude : magnitude;
  }
  return table;
}

}  // namespace

float F8E4M3ToF32(Float8E4M3 v) {
  static const std::array<float, 256> kTable = DecodeTable();
  return kTable[v.bits];
}

Float8E4M3 F32ToF8E4M3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return Float8E4M3{static_cast<uint8_t>(sign | 0x7f)};  // NaN
  if (std::bit_cast<float>(abs) >= kFloat8E4M3Max)
    return Float8E4M3{static_cast<uint8_t>(sign | 0x7e)};
  const int e = static_cast<int>(abs >> 23) - 127;  // unbiased f32 exponent
  if (e < -6) {
    // Subnormal or zero: the value in units of 2^-9, rounded to nearest even (at most 8, which
    // is the smallest normal's code and carries into the exponent field by itself).
    const float units = std::ldexp(std::bit_cast<float>(abs), 9);
    const float rounded = std::nearbyint(units);  // the default rounding mode: to nearest even
    return Float8E4M3{static_cast<uint8_t>(sign | static_cast<uint8_t>(rounded))};
  }
  // Normal: keep 3 of f32's 23 mantissa bits, rounding to nearest even; a carry out of the
  // mantissa moves into the exponent, and 448's neighbourhood was saturated above.
  uint32_t code = (static_cast<uint32_t>(e + 7) << 3) | ((abs >> 20) & 0x7u);
  const uint32_t rest = abs & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (code & 1u) != 0)) ++code;
  if (code > 0x7e) code = 0x7e;
  return Float8E4M3{static_cast<uint8_t>(sign | code)};
}

}  // namespace framezip::engine
