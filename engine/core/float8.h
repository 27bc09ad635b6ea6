// FP8 E4M3 storage (OCP "E4M3FN": torch.float8_e4m3fn, safetensors' F8_E4M3): 1 sign bit, 4
// exponent bits with bias 7, 3 mantissa bits; no infinities, and S.1111.111 is NaN, so the
// largest finite magnitude is 448 (S.1111.110) and the smallest subnormal 2^-9. Every E4M3 value
// is exact in bf16 and f32. Checkpoints quantised to FP8 (compressed-tensors "float-quantized")
// store their weights so; arithmetic is never done in this type.
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"

namespace framezip::engine {

struct Float8E4M3 {
  uint8_t bits = 0;
};

template <>
struct DTypeOf<Float8E4M3> {
  static constexpr DType kValue = DType::kF8E4M3;
};

inline constexpr float kFloat8E4M3Max = 448.0f;

float F8E4M3ToF32(Float8E4M3 v);

// Round to nearest even. Magnitudes beyond 448 saturate to ±448, as quantisers clamp to the
// format's range before they cast (torch's cast would give NaN there); NaN stays NaN.
Float8E4M3 F32ToF8E4M3(float f);

}  // namespace framezip::engine
