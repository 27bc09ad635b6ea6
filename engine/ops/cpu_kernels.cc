#include "engine/ops/cpu_kernels.h"

#include <cblas.h>
#include <cpuid.h>
#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>

#include "engine/core/half.h"

#define FZ_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace framezip::engine::ops::cpu {
namespace {

bool DetectAvx2() {
  if (const char* env = std::getenv("FRAMEZIP_NO_SIMD"); env != nullptr && env[0] == '1') {
    return false;
  }
  __builtin_cpu_init();
  // F16C from CPUID leaf 1, ECX bit 29: clang's __builtin_cpu_supports does not know "f16c".
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  const bool f16c = (ecx & (1u << 29)) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

const bool kAvx2 = DetectAvx2();

inline float LoadScalar(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16:
      return BF16ToF32(static_cast<const BFloat16*>(p)[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const Float16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// ---- AVX2 ---------------------------------------------------------------------------------

FZ_AVX2 inline float HSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  lo = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, lo);
  lo = _mm_add_ss(lo, sh);
  return _mm_cvtss_f32(lo);
}

template <DType T>
FZ_AVX2 inline __m256 Load8(const void* p, int64_t i) {
  if constexpr (T == DType::kBF16) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (T == DType::kF16) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    return _mm256_cvtph_ps(h);
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
}

template <DType T>
FZ_AVX2 void ToF32Avx2(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, Load8<T>(src, i));
  for (; i < n; ++i) dst[i] = LoadScalar(src, T, i);
}

FZ_AVX2 float DotAvx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  float s = HSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

FZ_AVX2 void AxpyAvx2(float alpha, const float* x, int64_t n, float* y) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// R weight rows × MM rows of x at a time: R·MM independent accumulators hide FMA latency, and
// each 8-wide weight load is converted once and used MM times.
//
// Register plan (16 ymm): R·MM accumulators, the R converted weight vectors, one x vector. Each
// x vector is loaded once into a register and used R times; the empty asm keeps the compiler
// from folding the load into every FMA as a memory operand instead (R loads of the same x per
// k step). On this machine's Zen 3 cores the folded form ran 3×4 at ~50 GFLOP/s per core and
// this one at ~80, L1-resident or on the 0.5B shapes, with the same FMAs in the same order.
//
// With kPrefetch, the R rows `prefetch_rows` ahead are fetched into L2 as the loop goes, one
// cache line per row per 64 bytes of weights (see GemvRowsAvx2).
template <DType T, int R, int MM, bool kPrefetch = false>
FZ_AVX2 void GemvBlock(const float* x, int64_t ldx, const void* w, int64_t K, int64_t j, float* y,
                       int64_t ldy, int64_t prefetch_rows = 0) {
  constexpr int64_t kWeightSize = T == DType::kF32 ? 4 : 2;
  constexpr int64_t kLineElems = 64 / kWeightSize;
  const char* pf = static_cast<const char*>(w) + (j + prefetch_rows) * K * kWeightSize;
  __m256 acc[R][MM];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MM; ++m) acc[r][m] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    if constexpr (kPrefetch) {
      if (k % kLineElems == 0) {
        for (int r = 0; r < R; ++r) _mm_prefetch(pf + (r * K + k) * kWeightSize, _MM_HINT_T1);
      }
    }
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = Load8<T>(w, (j + r) * K + k);
    for (int m = 0; m < MM; ++m) {
      __m256 xv = _mm256_loadu_ps(x + m * ldx + k);
      __asm__("" : "+x"(xv));
      for (int r = 0; r < R; ++r) acc[r][m] = _mm256_fmadd_ps(wv[r], xv, acc[r][m]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < MM; ++m) {
      float s = HSum(acc[r][m]);
      for (int64_t kk = k; kk < K; ++kk) s += x[m * ldx + kk] * LoadScalar(w, T, (j + r) * K + kk);
      y[m * ldy + j + r] = s;
    }
  }
}

// R per MM: the most accumulators (R·MM) that still leave registers for the MM x vectors and a
// weight vector. With 4 x rows, 3 weight rows (12 accumulators) run ~1.45x faster than 2 on
// this machine's AVX2 cores (a standalone timing of [16, 896] x [4864, 896]^T, bf16): 8 chains
// could not hide the FMA latency. The accumulation order of each output is the same whatever R,
// MM or the batch size, so results do not depend on how many rows are batched.
//
// prefetch_rows > 0: while computing rows [j0, j1), fetch the rows prefetch_rows further on, up
// to row `prefetch_end` (exclusive).
template <DType T, int MM>
FZ_AVX2 void GemvRowsMM(const float* x, int64_t ldx, const void* w, int64_t K, int64_t j0,
                        int64_t j1, float* y, int64_t ldy, int64_t prefetch_rows = 0,
                        int64_t prefetch_end = 0) {
  constexpr int R = MM <= 2 ? 4 : 3;
  int64_t j = j0;
  for (; j + R <= j1; j += R) {
    if (prefetch_rows > 0 && j + prefetch_rows + R <= prefetch_end) {
      GemvBlock<T, R, MM, true>(x, ldx, w, K, j, y, ldy, prefetch_rows);
    } else {
      GemvBlock<T, R, MM>(x, ldx, w, K, j, y, ldy);
    }
  }
  for (; j < j1; ++j) GemvBlock<T, 1, MM>(x, ldx, w, K, j, y, ldy);
}

// Weight rows are taken kRowBlock at a time and every group of x rows runs over the block
// before the next one: the block (24 rows, <= 240 KB for K <= 4864 in bf16) stays in L1/L2, so
// the weights are read from memory once per call, not once per group of 4 x rows — batched
// decode (M = 16) would otherwise stream them 4 times. The last group's pass over a block also
// prefetches the next block into L2, so the first pass over it does not wait on memory: with
// two threads, [16, 896] x [4864, 896]^T went from ~90 to ~110-125 GFLOP/s on this machine
// (weights streamed from DRAM, 24 layers' worth).
template <DType T>
FZ_AVX2 void GemvRowsAvx2(const float* x, int64_t M, int64_t ldx, const void* w, int64_t K,
                          int64_t j0, int64_t j1, float* y, int64_t ldy) {
  constexpr int64_t kRowBlock = 24;  // a multiple of every R below
  const int64_t full_groups = M / 4, rest = M % 4;
  for (int64_t jb = j0; jb < j1; jb += kRowBlock) {
    const int64_t je = std::min(j1, jb + kRowBlock);
    for (int64_t g = 0; g < full_groups; ++g) {
      const bool last = rest == 0 && g + 1 == full_groups;
      GemvRowsMM<T, 4>(x + g * 4 * ldx, ldx, w, K, jb, je, y + g * 4 * ldy, ldy,
                       last ? kRowBlock : 0, j1);
    }
    const int64_t m = full_groups * 4;
    switch (rest) {
      case 3:
        GemvRowsMM<T, 3>(x + m * ldx, ldx, w, K, jb, je, y + m * ldy, ldy, kRowBlock, j1);
        break;
      case 2:
        GemvRowsMM<T, 2>(x + m * ldx, ldx, w, K, jb, je, y + m * ldy, ldy, kRowBlock, j1);
        break;
      case 1:
        GemvRowsMM<T, 1>(x + m * ldx, ldx, w, K, jb, je, y + m * ldy, ldy, kRowBlock, j1);
        break;
      default:
        break;
    }
  }
}

// exp(x) for 8 lanes, Cephes expf polynomial (max rel. error ~2 ulp); x < -87 gives 0.
FZ_AVX2 inline __m256 Exp8(__m256 x) {
  const __m256 zero_mask = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500E-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(zero_mask, y);
}

FZ_AVX2 float ExpShiftSumAvx2(float* s, int64_t n, float max) {
  const __m256 vm = _mm256_set1_ps(max);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
    _mm256_storeu_ps(s + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = HSum(acc);
  for (; i < n; ++i) {
    s[i] = std::isinf(s[i]) && s[i] < 0 ? 0.f : std::exp(s[i] - max);
    sum += s[i];
  }
  return sum;
}

// ---- Portable -------------------------------------------------------------------------------

void GemvRowsScalar(const float* x, int64_t M, int64_t ldx, const void* w, DType wdtype, int64_t K,
                    int64_t j0, int64_t j1, float* y, int64_t ldy) {
  float row[256];
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t m = 0; m < M; ++m) y[m * ldy + j] = 0;
    for (int64_t k0 = 0; k0 < K; k0 += 256) {
      const int64_t kn = std::min<int64_t>(256, K - k0);
      for (int64_t k = 0; k < kn; ++k) row[k] = LoadScalar(w, wdtype, j * K + k0 + k);
      for (int64_t m = 0; m < M; ++m) {
        float s = 0;
        for (int64_t k = 0; k < kn; ++k) s += x[m * ldx + k0 + k] * row[k];
        y[m * ldy + j] += s;
      }
    }
  }
}

}  // namespace

bool UseAvx2() { return kAvx2; }

void EnsureBlasSingleThreaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void ToF32(const void* src, DType dtype, int64_t n, float* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  if (kAvx2) {
    if (dtype == DType::kBF16) return ToF32Avx2<DType::kBF16>(src, n, dst);
    if (dtype == DType::kF16) return ToF32Avx2<DType::kF16>(src, n, dst);
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = LoadScalar(src, dtype, i);
}

float Dot(const float* a, const float* b, int64_t n) {
  if (kAvx2) return DotAvx2(a, b, n);
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  if (kAvx2) return AxpyAvx2(alpha, x, n, y);
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void Scale(float alpha, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

void GemvRows(const float* x, int64_t M, int64_t ldx, const void* w, DType wdtype, int64_t K,
              int64_t j0, int64_t j1, float* y, int64_t ldy) {
  if (kAvx2) {
    switch (wdtype) {
      case DType::kBF16:
        return GemvRowsAvx2<DType::kBF16>(x, M, ldx, w, K, j0, j1, y, ldy);
      case DType::kF16:
        return GemvRowsAvx2<DType::kF16>(x, M, ldx, w, K, j0, j1, y, ldy);
      default:
        return GemvRowsAvx2<DType::kF32>(x, M, ldx, w, K, j0, j1, y, ldy);
    }
  }
  GemvRowsScalar(x, M, ldx, w, wdtype, K, j0, j1, y, ldy);
}

float ExpShiftSum(float* s, int64_t n, float max) {
  if (kAvx2) return ExpShiftSumAvx2(s, n, max);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = std::isinf(s[i]) && s[i] < 0 ? 0.f : std::exp(s[i] - max);
    sum += s[i];
  }
  return sum;
}

}  // namespace framezip::engine::ops::cpu
