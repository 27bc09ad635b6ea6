// The per-ISA builds of the vectorised loops of cpu_kernels.h (internal to engine/ops):
// cpu_kernels.cc dispatches to one of them once per process, and the tests call each one the
// machine can run against the same f64 references. Every function has the contract of its
// namesake in cpu_kernels.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/core/half.h"
#include "engine/ops/cpu_kernels.h"  // constants of the contracts
#include "engine/ops/kv_quant.h"     // kvq::QuantizeOne, the scalar code of QuantizeCodes

namespace framezip::engine::ops::cpu {

// Scalar pieces shared by the portable loops (cpu_kernels.cc) and the SIMD builds' tails. They are
// defined here, before any target region, so every copy is baseline x86-64 code.

// Element i of a f32, bf16 or f16 array, as f32.
inline float LoadAsF32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16:
      return BF16ToF32(static_cast<const BFloat16*>(p)[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const Float16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// Code i (0..15) of int4 codes packed two per byte, low nibble first.
inline int Int4Code(const uint8_t* packed, int64_t i) {
  const uint8_t byte = packed[i / 2];
  return (i % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
}

// exp(s - max) for one softmax entry, -inf giving 0.
inline float ExpShifted(float s, float max) {
  return std::isinf(s) && s < 0 ? 0.f : std::exp(s - max);
}

#define FRAMEZIP_CPU_KERNELS_OF_ONE_ISA                                                           \
  void ToF32(const void* src, DType dtype, int64_t n, float* dst);                                \
  void ToF16(const float* src, int64_t n, Float16* dst);                                          \
  float Dot(const float* a, const float* b, int64_t n);                                           \
  float Sum(const float* x, int64_t n);                                                           \
  void Axpy(float alpha, const float* x, int64_t n, float* y);                                    \
  void GemvRows(const float* x, int64_t M, int64_t ldx, const void* w, DType wdtype, int64_t K,   \
                int64_t j0, int64_t j1, float* y, int64_t ldy);                                   \
  float ExpShiftSum(float* s, int64_t n, float max);                                              \
  float Max(const float* x, int64_t n);                                                           \
  void SiluMul(const float* g, const float* u, int64_t n, float* y);                              \
  void GeluTanh(const float* x, int64_t n, float* y);                                             \
  void GeluErf(const float* x, int64_t n, float* y);                                              \
  void DequantizeInt4Row(const uint8_t* packed, int64_t first, int64_t n, const float* scale,     \
                         float* out);                                                             \
  void QuantizeCodes(const float* x, const float* scale, const float* zero, int64_t stride,       \
                     int64_t n, int bits, uint8_t* codes);                                        \
  void WeightedRowsSum(const float* w, int64_t ldw, int64_t heads, const float* u, int64_t rank,  \
                       const uint16_t* ranks, int64_t n, float* z);                               \
  void TurnLanes(const float* base_cos, const float* base_sin, const float* lane_cos,             \
                 const float* lane_sin, int64_t pairs, float* cos, float* sin);                   \
  void LowRankScoreLanes(const float* ut, const float* vt, int64_t rank, int64_t kv_heads,        \
                         int64_t d, int64_t heads, const float* q, float scale, const float* cos, \
                         const float* sin, float* scores, int64_t ld, int64_t n);

// AVX2 + FMA + F16C, 8 f32 lanes (cpu_kernels_avx2.cc).
namespace avx2 {
FRAMEZIP_CPU_KERNELS_OF_ONE_ISA
}  // namespace avx2

// AVX-512F, 16 f32 lanes and 32 registers (cpu_kernels_avx512.cc).
namespace avx512 {
FRAMEZIP_CPU_KERNELS_OF_ONE_ISA
}  // namespace avx512

#undef FRAMEZIP_CPU_KERNELS_OF_ONE_ISA

}  // namespace framezip::engine::ops::cpu
