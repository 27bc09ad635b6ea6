#include "engine/ops/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string_view>

#include "engine/core/half.h"
#include "engine/ops/cpu_isa.h"
#include "engine/ops/cpu_kernels_isa.h"

namespace framezip::engine::ops::cpu {
namespace {

enum class Simd { kScalar, kAvx2, kAvx512 };

// The widest ISA this CPU runs, lowered by FRAMEZIP_CPU_KERNELS=avx2|scalar (to time or check
// one ISA against another on the same machine; FRAMEZIP_NO_SIMD=1 is the same as scalar).
Simd ChooseSimd() {
  const CpuIsa& isa = DetectedIsa();
  Simd simd = isa.avx512f ? Simd::kAvx512 : isa.avx2 ? Simd::kAvx2 : Simd::kScalar;
  if (const char* cap = std::getenv("FRAMEZIP_CPU_KERNELS"); cap != nullptr) {
    const std::string_view v(cap);
    if (v == "scalar") {
      simd = Simd::kScalar;
    } else if (v == "avx2") {
      if (simd == Simd::kAvx512) simd = Simd::kAvx2;
    } else if (v != "avx512") {
      std::fprintf(stderr,
                   "warning: FRAMEZIP_CPU_KERNELS=%s is not avx512, avx2 or scalar; using the "
                   "widest ISA this CPU has\n",
                   cap);
    }
  }
  return simd;
}

const Simd kSimd = ChooseSimd();

void GemvRowsScalar(const float* x, int64_t M, int64_t ldx, const void* w, DType wdtype, int64_t K,
                    int64_t j0, int64_t j1, float* y, int64_t ldy) {
  float row[256];
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t m = 0; m < M; ++m) y[m * ldy + j] = 0;
    for (int64_t k0 = 0; k0 < K; k0 += 256) {
      const int64_t kn = std::min<int64_t>(256, K - k0);
      for (int64_t k = 0; k < kn; ++k) row[k] = LoadAsF32(w, wdtype, j * K + k0 + k);
      for (int64_t m = 0; m < M; ++m) {
        float s = 0;
        for (int64_t k = 0; k < kn; ++k) s += x[m * ldx + k0 + k] * row[k];
        y[m * ldy + j] += s;
      }
    }
  }
}

}  // namespace

bool UseAvx2() { return kSimd != Simd::kScalar; }
bool UseAvx512() { return kSimd == Simd::kAvx512; }

std::string KernelIsa() {
  switch (kSimd) {
    case Simd::kAvx512:
      return "avx512";
    case Simd::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

void EnsureBlasSingleThreaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void ToF16(const float* src, int64_t n, Float16* dst) {
  if (kSimd == Simd::kAvx512) return avx512::ToF16(src, n, dst);
  if (kSimd == Simd::kAvx2) return avx2::ToF16(src, n, dst);
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToF16(src[i]);
}

void ToF32(const void* src, DType dtype, int64_t n, float* dst) {
  if (kSimd == Simd::kAvx512) return avx512::ToF32(src, dtype, n, dst);
  if (kSimd == Simd::kAvx2) return avx2::ToF32(src, dtype, n, dst);
  for (int64_t i = 0; i < n; ++i) dst[i] = LoadAsF32(src, dtype, i);
}

float Dot(const float* a, const float* b, int64_t n) {
  if (kSimd == Simd::kAvx512) return avx512::Dot(a, b, n);
  if (kSimd == Simd::kAvx2) return avx2::Dot(a, b, n);
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

float Sum(const float* x, int64_t n) {
  if (kSimd == Simd::kAvx512) return avx512::Sum(x, n);
  if (kSimd == Simd::kAvx2) return avx2::Sum(x, n);
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  if (kSimd == Simd::kAvx512) return avx512::Axpy(alpha, x, n, y);
  if (kSimd == Simd::kAvx2) return avx2::Axpy(alpha, x, n, y);
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void Scale(float alpha, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

void GemvRows(const float* x, int64_t M, int64_t ldx, const void* w, DType wdtype, int64_t K,
              int64_t j0, int64_t j1, float* y, int64_t ldy) {
  if (kSimd == Simd::kAvx512) return avx512::GemvRows(x, M, ldx, w, wdtype, K, j0, j1, y, ldy);
  if (kSimd == Simd::kAvx2) return avx2::GemvRows(x, M, ldx, w, wdtype, K, j0, j1, y, ldy);
  GemvRowsScalar(x, M, ldx, w, wdtype, K, j0, j1, y, ldy);
}

void SiluMul(const float* g, const float* u, int64_t n, float* y) {
  if (kSimd == Simd::kAvx512) return avx512::SiluMul(g, u, n, y);
  if (kSimd == Simd::kAvx2) return avx2::SiluMul(g, u, n, y);
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void GeluTanh(const float* x, int64_t n, float* y) {
  if (kSimd == Simd::kAvx512) return avx512::GeluTanh(x, n, y);
  if (kSimd == Simd::kAvx2) return avx2::GeluTanh(x, n, y);
  constexpr float kBeta = 0.79788456080286536f;  // sqrt(2/pi)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(kBeta * (v + 0.044715f * v * v * v)));
  }
}

void GeluErf(const float* x, int64_t n, float* y) {
  if (kSimd == Simd::kAvx512) return avx512::GeluErf(x, n, y);
  if (kSimd == Simd::kAvx2) return avx2::GeluErf(x, n, y);
  for (int64_t i = 0; i < n; ++i)
    y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

void DequantizeInt4Row(const uint8_t* packed, int64_t first, int64_t n, const float* scale,
                       float* out) {
  if (first % 2 == 0) {
    if (kSimd == Simd::kAvx512) return avx512::DequantizeInt4Row(packed, first, n, scale, out);
    if (kSimd == Simd::kAvx2) return avx2::DequantizeInt4Row(packed, first, n, scale, out);
  }
  for (int64_t c = 0; c < n; ++c)
    out[c] = static_cast<float>(Int4Code(packed, first + c) - 8) * scale[c];
}

void QuantizeCodes(const float* x, const float* scale, const float* zero, int64_t stride, int64_t n,
                   int bits, uint8_t* codes) {
  if (kSimd == Simd::kAvx512) return avx512::QuantizeCodes(x, scale, zero, stride, n, bits, codes);
  if (kSimd == Simd::kAvx2) return avx2::QuantizeCodes(x, scale, zero, stride, n, bits, codes);
  for (int64_t i = 0; i < n; ++i) {
    codes[i] = kvq::QuantizeOne(x[i], scale[i * stride], zero[i * stride], bits);
  }
}

void WeightedRowsSum(const float* w, int64_t ldw, int64_t heads, const float* u, int64_t rank,
                     const uint16_t* ranks, int64_t n, float* z) {
  if (kSimd == Simd::kAvx512) return avx512::WeightedRowsSum(w, ldw, heads, u, rank, ranks, n, z);
  if (kSimd == Simd::kAvx2) return avx2::WeightedRowsSum(w, ldw, heads, u, rank, ranks, n, z);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      const float wi = w[h * ldw + i];
      for (int64_t j = 0; j < ranks[i]; ++j) z[h * rank + j] += wi * u[i * rank + j];
    }
  }
}

void TurnLanes(const float* base_cos, const float* base_sin, const float* lane_cos,
               const float* lane_sin, int64_t pairs, float* cos, float* sin) {
  if (kSimd == Simd::kAvx512) {
    return avx512::TurnLanes(base_cos, base_sin, lane_cos, lane_sin, pairs, cos, sin);
  }
  if (kSimd == Simd::kAvx2) {
    return avx2::TurnLanes(base_cos, base_sin, lane_cos, lane_sin, pairs, cos, sin);
  }
  constexpr int64_t W = kLowRankLanes;
  for (int64_t c = 0; c < pairs; ++c) {
    const float bc = base_cos[c], bs = base_sin[c];
    for (int64_t l = 0; l < W; ++l) {
      const float lc = lane_cos[c * W + l], ls = lane_sin[c * W + l];
      cos[c * W + l] = std::fma(-bs, ls, bc * lc);
      sin[c * W + l] = std::fma(bc, ls, bs * lc);
    }
  }
}

void LowRankScoreLanes(const float* ut, const float* vt, int64_t rank, int64_t kv_heads, int64_t d,
                       int64_t heads, const float* q, float scale, const float* cos,
                       const float* sin, float* scores, int64_t ld, int64_t n) {
  if (heads / kv_heads <= kLowRankMaxGroup) {
    if (kSimd == Simd::kAvx512) {
      return avx512::LowRankScoreLanes(ut, vt, rank, kv_heads, d, heads, q, scale, cos, sin, scores,
                                       ld, n);
    }
    if (kSimd == Simd::kAvx2) {
      return avx2::LowRankScoreLanes(ut, vt, rank, kv_heads, d, heads, q, scale, cos, sin, scores,
                                     ld, n);
    }
  }
  constexpr int64_t W = kLowRankLanes;
  const int64_t hd = kv_heads * d, half = d / 2, group = heads / kv_heads;
  for (int64_t l = 0; l < n; ++l) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* vg = vt + (h / group) * d;
      float acc = 0;
      for (int64_t c = 0; c < half; ++c) {
        float a = 0, b = 0;
        for (int64_t j = 0; j < rank; ++j) {
          a += ut[j * W + l] * vg[j * hd + c];
          b += ut[j * W + l] * vg[j * hd + c + half];
        }
        const float co = cos[c * W + l], si = sin[c * W + l];
        acc += q[h * d + c] * (a * co - b * si) + q[h * d + c + half] * (b * co + a * si);
      }
      scores[h * ld + l] = scale * acc;
    }
  }
}

float Max(const float* x, int64_t n) {
  if (kSimd == Simd::kAvx512) return avx512::Max(x, n);
  if (kSimd == Simd::kAvx2) return avx2::Max(x, n);
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

float ExpShiftSum(float* s, int64_t n, float max) {
  if (kSimd == Simd::kAvx512) return avx512::ExpShiftSum(s, n, max);
  if (kSimd == Simd::kAvx2) return avx2::ExpShiftSum(s, n, max);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = ExpShifted(s[i], max);
    sum += s[i];
  }
  return sum;
}

}  // namespace framezip::engine::ops::cpu
