#include "engine/ops/gemm_int8.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/ops/cpu_isa.h"
#include "engine/ops/gemm_amx.h"

// GCC 12's AVX-512 intrinsics start from a deliberately undefined register, which its own
// uninitialised-use warnings flag once inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace framezip::engine::ops::cpu {
namespace {

constexpr int64_t kTileBytes = 1024;  // 16 rows × 64 bytes
constexpr int64_t kBlock = 32;        // rows and columns of a y block on the tile unit

struct Int8Isa {
  bool avx512_vnni = false;  // with AVX-512 F and BW
  bool amx_int8 = false;     // the CPU bit only; the OS grant is AmxBf16Ready()'s
};

// CPUID leaf 7: EBX bit 30 AVX512BW, ECX bit 11 AVX512_VNNI, EDX bit 25 AMX-INT8. What the OS
// saves (zmm, tiles) and FRAMEZIP_NO_SIMD are DetectedIsa()'s, which this builds on.
const Int8Isa& DetectedInt8Isa() {
  static const Int8Isa isa = [] {
    Int8Isa out;
    const CpuIsa& base = DetectedIsa();
    unsigned a = 0, b = 0, c = 0, d = 0;
    __cpuid_count(7, 0, a, b, c, d);
    out.avx512_vnni = base.avx512f && (b & (1u << 30)) != 0 && (c & (1u << 11)) != 0;
    out.amx_int8 = base.amx_bf16 && (d & (1u << 25)) != 0;
    return out;
  }();
  return isa;
}

int8_t PackedAt(const PackedInt8Weight& w, int64_t j, int64_t kk) {
  const int64_t cb = j / 16, c = j % 16, kb = kk / 64, r = (kk % 64) / 4, i = kk % 4;
  return w.data[static_cast<size_t>(((cb * w.k_blocks + kb) * 16 + r) * 64 + c * 4 + i)];
}

// ---- Quantising x --------------------------------------------------------------------------

int8_t QuantizeOne(float v, float inv) {
  const float r = std::nearbyint(v * inv);  // the current rounding mode: to nearest even
  return static_cast<int8_t>(std::clamp(r, -127.f, 127.f));
}

void QuantizeRowScalar(const float* x, int64_t k, bool offset_u8, int8_t* q, int64_t ldq,
                       float* scale) {
  float max = 0;
  for (int64_t i = 0; i < k; ++i) max = std::max(max, std::fabs(x[i]));
  const float inv = max > 0 ? 127.f / max : 0.f;
  *scale = max / 127.f;
  const uint8_t flip = offset_u8 ? 0x80 : 0;
  for (int64_t i = 0; i < k; ++i) q[i] = static_cast<int8_t>(QuantizeOne(x[i], inv) ^ flip);
  std::memset(q + k, flip, static_cast<size_t>(ldq - k));
}

__attribute__((target("avx512f,avx512bw"))) void QuantizeRowAvx512(const float* x, int64_t k,
                                                                   bool offset_u8, int8_t* q,
                                                                   int64_t ldq, float* scale) {
  __m512 vmax = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 mask =
        k - i >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (k - i)) - 1);
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(mask, x + i)));
  }
  const float max = _mm512_reduce_max_ps(vmax);
  const float inv = max > 0 ? 127.f / max : 0.f;
  *scale = max / 127.f;
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m128i flip = _mm_set1_epi8(offset_u8 ? static_cast<char>(0x80) : 0);
  for (int64_t i = 0; i < ldq; i += 16) {
    const int64_t left = std::max<int64_t>(0, k - i);
    const __mmask16 mask =
        left >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << left) - 1);
    const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + i), vinv));
    const __m512i clamped =
        _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     _mm_xor_si128(_mm512_cvtepi32_epi8(clamped), flip));
  }
}

__attribute__((target("avx2,fma"))) void QuantizeRowAvx2(const float* x, int64_t k, bool offset_u8,
                                                         int8_t* q, int64_t ldq, float* scale) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 vmax = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float max = 0;
  for (float v : lanes) max = std::max(max, v);
  for (; i < k; ++i) max = std::max(max, std::fabs(x[i]));
  const float inv = max > 0 ? 127.f / max : 0.f;
  *scale = max / 127.f;
  const __m256 vinv = _mm256_set1_ps(inv);
  const uint8_t flip = offset_u8 ? 0x80 : 0;
  const __m128i vflip = _mm_set1_epi8(static_cast<char>(flip));
  i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
    const __m128i s16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    // packs saturates to [-128, 127]; |v| ≤ 127 already (max · 127 / max rounds to 127 at most).
    const __m128i s8 = _mm_max_epi8(_mm_packs_epi16(s16, s16), _mm_set1_epi8(-127));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_xor_si128(s8, vflip));
  }
  for (; i < k; ++i) q[i] = static_cast<int8_t>(QuantizeOne(x[i], inv) ^ flip);
  std::memset(q + k, flip, static_cast<size_t>(ldq - k));
}

// ---- The epilogue: int32 sums to y -----------------------------------------------------------

// y[j] = sum[j] · (x_scale · w_scale[j]) + bias[j] for the `valid` columns of a 16-column block.
void FinishScalar(const int32_t* sum, float x_scale, const float* w_scale, const float* bias,
                  int64_t valid, float* y) {
  for (int64_t c = 0; c < valid; ++c) {
    y[c] = static_cast<float>(sum[c]) * (x_scale * w_scale[c]) + (bias ? bias[c] : 0.f);
  }
}

__attribute__((target("avx512f"))) void Finish16(__m512i sum, float x_scale, const float* w_scale,
                                                 const float* bias, int64_t valid, float* y) {
  const __mmask16 mask =
      valid >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << valid) - 1);
  const __m512 s = _mm512_mul_ps(_mm512_set1_ps(x_scale), _mm512_loadu_ps(w_scale));
  __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), s);
  if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias));
  _mm512_mask_storeu_ps(y, mask, v);
}

// ---- GEMV kernels -----------------------------------------------------------------------------

// The four bytes of x at p as one 32-bit lane (memcpy: x is an int8 array).
inline int32_t Quad(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void GemvScalar(const int8_t* xq, const float* x_scale, int64_t m, const PackedInt8Weight& w,
                int64_t j0, int64_t j1, const float* bias, float* y, int64_t ldy) {
  const int64_t kp = w.k_padded();
  int32_t sums[16];
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c0 = j0; c0 < j1; c0 += 16) {
      const int64_t valid = std::min<int64_t>(16, j1 - c0);
      for (int64_t c = 0; c < valid; ++c) {
        int32_t s = 0;
        for (int64_t kk = 0; kk < w.k; ++kk)
          s += int32_t{xq[i * kp + kk]} * PackedAt(w, c0 + c, kk);
        sums[c] = s;
      }
      FinishScalar(sums, x_scale[i], w.scale.data() + c0, bias ? bias + c0 : nullptr, valid,
                   y + i * ldy + c0);
    }
  }
}

// R rows of x × B 16-column blocks: B zmm of weights per k quad, R·B accumulators.
template <int R, int B>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void VnniTile(
    const int8_t* xu, int64_t kp, const float* x_scale, const PackedInt8Weight& w, int64_t c0,
    int64_t j1, const float* bias, float* y, int64_t ldy) {
  const int64_t quads = w.k_blocks * 16;
  const int8_t* wb[B];
  for (int b = 0; b < B; ++b) wb[b] = w.data.data() + (c0 / 16 + b) * w.k_blocks * kTileBytes;
  __m512i acc[R][B];
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_si512();
  }
  for (int64_t t = 0; t < quads; ++t) {
    __m512i wv[B];
    for (int b = 0; b < B; ++b) wv[b] = _mm512_loadu_si512(wb[b] + t * 64);
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_set1_epi32(Quad(xu + r * kp + 4 * t));
      for (int b = 0; b < B; ++b) acc[r][b] = _mm512_dpbusd_epi32(acc[r][b], xv, wv[b]);
    }
  }
  for (int b = 0; b < B; ++b) {
    const int64_t col = c0 + 16 * b;
    if (col >= j1) break;
    // x was offset by +128: Σ (q_x + 128)·q_w = Σ q_x·q_w + 128·Σ q_w.
    const __m512i correction = _mm512_slli_epi32(_mm512_loadu_si512(w.col_sums.data() + col), 7);
    for (int r = 0; r < R; ++r) {
      Finish16(_mm512_sub_epi32(acc[r][b], correction), x_scale[r], w.scale.data() + col,
               bias ? bias + col : nullptr, j1 - col, y + r * ldy + col);
    }
  }
}

// R rows of x × one 16-column block (two ymm of 8 columns): the sign trick, exact. VPMADDUBSW
// multiplies unsigned by signed bytes, so the weights' magnitudes (|q| ≤ 128: a checkpoint's
// quantiser may use -128) are the unsigned side and x, given the weights' signs, the signed side
// (|x| ≤ 127, so the sign never overflows); a pair sums to at most 2 · 128 · 127 < 2¹⁵.
template <int R>
__attribute__((target("avx2,fma"))) void Avx2Tile(const int8_t* xq, int64_t kp,
                                                  const float* x_scale, const PackedInt8Weight& w,
                                                  int64_t c0, int64_t j1, const float* bias,
                                                  float* y, int64_t ldy) {
  const int64_t quads = w.k_blocks * 16;
  const int8_t* wb = w.data.data() + (c0 / 16) * w.k_blocks * kTileBytes;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t t = 0; t < quads; ++t) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + t * 64));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + t * 64 + 32));
    // |-128| is 0x80, which VPMADDUBSW reads as the unsigned 128.
    const __m256i aw0 = _mm256_abs_epi8(w0), aw1 = _mm256_abs_epi8(w1);
    for (int r = 0; r < R; ++r) {
      const __m256i xv = _mm256_set1_epi32(Quad(xq + r * kp + 4 * t));
      const __m256i p0 = _mm256_maddubs_epi16(aw0, _mm256_sign_epi8(xv, w0));
      const __m256i p1 = _mm256_maddubs_epi16(aw1, _mm256_sign_epi8(xv, w1));
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(p0, ones));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(p1, ones));
    }
  }
  const int64_t valid = std::min<int64_t>(16, j1 - c0);
  alignas(32) int32_t sums[16];
  for (int r = 0; r < R; ++r) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums), acc[r][0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(sums + 8), acc[r][1]);
    FinishScalar(sums, x_scale[r], w.scale.data() + c0, bias ? bias + c0 : nullptr, valid,
                 y + r * ldy + c0);
  }
}

template <int R>
void VnniRows(const int8_t* xu, int64_t kp, const float* x_scale, const PackedInt8Weight& w,
              int64_t j0, int64_t j1, const float* bias, float* y, int64_t ldy) {
  for (int64_t c0 = j0; c0 < j1; c0 += 64) {
    switch (std::min<int64_t>(4, (j1 - c0 + 15) / 16)) {
      case 1:
        VnniTile<R, 1>(xu, kp, x_scale, w, c0, j1, bias, y, ldy);
        break;
      case 2:
        VnniTile<R, 2>(xu, kp, x_scale, w, c0, j1, bias, y, ldy);
        break;
      case 3:
        VnniTile<R, 3>(xu, kp, x_scale, w, c0, j1, bias, y, ldy);
        break;
      default:
        VnniTile<R, 4>(xu, kp, x_scale, w, c0, j1, bias, y, ldy);
    }
  }
}

template <int R>
void Avx2Rows(const int8_t* xq, int64_t kp, const float* x_scale, const PackedInt8Weight& w,
              int64_t j0, int64_t j1, const float* bias, float* y, int64_t ldy) {
  for (int64_t c0 = j0; c0 < j1; c0 += 16) Avx2Tile<R>(xq, kp, x_scale, w, c0, j1, bias, y, ldy);
}

using RowsFn = void (*)(const int8_t*, int64_t, const float*, const PackedInt8Weight&, int64_t,
                        int64_t, const float*, float*, int64_t);

// Rows in groups of four (each weight vector loaded once per group), then the 1-3 left.
void ByRowGroups(const RowsFn fns[4], const int8_t* xq, const float* x_scale, int64_t m,
                 const PackedInt8Weight& w, int64_t j0, int64_t j1, const float* bias, float* y,
                 int64_t ldy) {
  const int64_t kp = w.k_padded();
  for (int64_t i = 0; i < m; i += 4) {
    const int64_t rows = std::min<int64_t>(4, m - i);
    fns[rows - 1](xq + i * kp, kp, x_scale + i, w, j0, j1, bias, y + i * ldy, ldy);
  }
}

// ---- AMX-INT8 ----------------------------------------------------------------------------------

// The tiles as gemm_amx.h configures them (ConfigureAmxTiles): 0-3 the int32 32×32 block of y,
// 4-5 two 16-row strips of x, 6-7 two 16-column strips of W.
__attribute__((target("amx-tile,amx-int8"))) void Block32x32Int8(const int8_t* a0, const int8_t* b0,
                                                                 int64_t k_blocks, int32_t* out) {
  const int8_t* a1 = a0 + k_blocks * kTileBytes;
  const int8_t* b1 = b0 + k_blocks * kTileBytes;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    const int64_t at = kb * kTileBytes;
    _tile_loadd(4, a0 + at, 64);
    _tile_loadd(6, b0 + at, 64);
    _tile_loadd(5, a1 + at, 64);
    _tile_loadd(7, b1 + at, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  constexpr int64_t kStride = kBlock * sizeof(int32_t);
  _tile_stored(0, out, kStride);
  _tile_stored(1, out + 16, kStride);
  _tile_stored(2, out + 16 * kBlock, kStride);
  _tile_stored(3, out + 16 * kBlock + 16, kStride);
}

__attribute__((target("avx512f"))) void FinishBlock(const int32_t* block, const float* x_scale,
                                                    int64_t rows, const float* w_scale,
                                                    const float* bias, int64_t valid_cols, float* y,
                                                    int64_t ldy) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t h = 0; h < 2 && 16 * h < valid_cols; ++h) {
      const int64_t at = 16 * h;
      Finish16(_mm512_loadu_si512(block + i * kBlock + at), x_scale[i], w_scale + at,
               bias ? bias + at : nullptr, valid_cols - at, y + i * ldy + at);
    }
  }
}

}  // namespace

std::string_view Int8KernelName(Int8Kernel kernel) {
  switch (kernel) {
    case Int8Kernel::kScalar:
      return "scalar";
    case Int8Kernel::kAvx2:
      return "avx2";
    case Int8Kernel::kAvx512Vnni:
      return "avx512_vnni";
    case Int8Kernel::kAmx:
      return "amx_int8";
  }
  return "?";
}

bool Int8KernelAvailable(Int8Kernel kernel) {
  switch (kernel) {
    case Int8Kernel::kScalar:
      return true;
    case Int8Kernel::kAvx2:
      return DetectedIsa().avx2;
    case Int8Kernel::kAvx512Vnni:
      return DetectedInt8Isa().avx512_vnni;
    case Int8Kernel::kAmx:
      return DetectedInt8Isa().amx_int8 && DetectedInt8Isa().avx512_vnni && AmxBf16Ready();
  }
  return false;
}

Int8Kernel Int8GemvKernel() {
  // The hand-written kernels' ISA (cpu_kernels.h), so that FRAMEZIP_CPU_KERNELS=avx2 or scalar
  // narrows these as well: an AVX2-only machine's path can be timed on a wider one.
  static const Int8Kernel kernel = [] {
    const std::string isa = KernelIsa();
    if (isa == "avx512" && Int8KernelAvailable(Int8Kernel::kAvx512Vnni)) {
      return Int8Kernel::kAvx512Vnni;
    }
    if (isa != "scalar" && Int8KernelAvailable(Int8Kernel::kAvx2)) return Int8Kernel::kAvx2;
    return Int8Kernel::kScalar;
  }();
  return kernel;
}

Int8Kernel Int8GemmKernel() {
  if (Int8KernelAvailable(Int8Kernel::kAmx) && AmxGemmEnabled()) return Int8Kernel::kAmx;
  return Int8GemvKernel();
}

void SizePackedInt8Weight(int64_t n, int64_t k, PackedInt8Weight& out) {
  out.n = n;
  out.k = k;
  out.k_blocks = std::max<int64_t>(1, (k + 63) / 64);
  out.col_blocks = (n + kBlock - 1) / kBlock * 2;
  const size_t cols = static_cast<size_t>(out.col_blocks * 16);
  out.data.assign(static_cast<size_t>(out.col_blocks * out.k_blocks * kTileBytes), 0);
  out.col_sums.assign(cols, 0);
  out.scale.assign(cols, 0.f);
}

void PackInt8Weight(const int8_t* q, const float* scale, int64_t col_block0, int64_t col_block1,
                    PackedInt8Weight& out) {
  const int64_t n = out.n, k = out.k;
  for (int64_t cb = col_block0; cb < col_block1; ++cb) {
    int8_t* tiles = out.data.data() + cb * out.k_blocks * kTileBytes;
    for (int64_t c = 0; c < 16; ++c) {
      const int64_t j = cb * 16 + c;
      if (j >= n) break;
      const int8_t* row = q + j * k;
      int32_t sum = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        tiles[(kk / 64) * kTileBytes + ((kk % 64) / 4) * 64 + c * 4 + kk % 4] = row[kk];
        sum += row[kk];
      }
      out.col_sums[static_cast<size_t>(j)] = sum;
      out.scale[static_cast<size_t>(j)] = scale[j];
    }
  }
}

void QuantizeRowsInt8(const float* x, int64_t ldx, int64_t k, int64_t row0, int64_t row1,
                      bool offset_u8, int8_t* xq, int64_t ldq, float* x_scale) {
  const CpuIsa& isa = DetectedIsa();
  for (int64_t i = row0; i < row1; ++i) {
    if (isa.avx512f) {
      QuantizeRowAvx512(x + i * ldx, k, offset_u8, xq + i * ldq, ldq, x_scale + i);
    } else if (isa.avx2) {
      QuantizeRowAvx2(x + i * ldx, k, offset_u8, xq + i * ldq, ldq, x_scale + i);
    } else {
      QuantizeRowScalar(x + i * ldx, k, offset_u8, xq + i * ldq, ldq, x_scale + i);
    }
  }
}

void Int8GemvRows(Int8Kernel kernel, const int8_t* xq, const float* x_scale, int64_t m,
                  const PackedInt8Weight& w, int64_t j0, int64_t j1, const float* bias, float* y,
                  int64_t ldy) {
  static constexpr RowsFn kVnni[4] = {VnniRows<1>, VnniRows<2>, VnniRows<3>, VnniRows<4>};
  static constexpr RowsFn kAvx2[4] = {Avx2Rows<1>, Avx2Rows<2>, Avx2Rows<3>, Avx2Rows<4>};
  switch (kernel) {
    case Int8Kernel::kAvx512Vnni:
      ByRowGroups(kVnni, xq, x_scale, m, w, j0, j1, bias, y, ldy);
      return;
    case Int8Kernel::kAvx2:
      ByRowGroups(kAvx2, xq, x_scale, m, w, j0, j1, bias, y, ldy);
      return;
    default:
      GemvScalar(xq, x_scale, m, w, j0, j1, bias, y, ldy);
  }
}

int64_t AmxInt8PackedRowsSize(int64_t m, int64_t k_padded) {
  return (m + kBlock - 1) / kBlock * kBlock * k_padded;
}

void PackInt8RowsForAmx(const int8_t* xq, int64_t m, int64_t k_padded, int64_t block0,
                        int64_t block1, int8_t* out) {
  const int64_t k_blocks = k_padded / 64;
  for (int64_t b = block0; b < block1; ++b) {
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      int8_t* tile = out + (b * k_blocks + kb) * kTileBytes;
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t row = b * 16 + i;
        if (row < m) {
          std::memcpy(tile + i * 64, xq + row * k_padded + kb * 64, 64);
        } else {
          std::memset(tile + i * 64, 0, 64);
        }
      }
    }
  }
}

void AmxInt8Gemm(const int8_t* x_tiles, const float* x_scale, int64_t row0, int64_t row1,
                 const PackedInt8Weight& w, int64_t j0, int64_t j1, const float* bias, float* y,
                 int64_t ldy) {
  const int64_t strip = w.k_blocks * kTileBytes;  // one 16-row (or 16-column) strip
  alignas(64) int32_t block[kBlock * kBlock];
  ConfigureAmxTiles();
  for (int64_t r = row0; r < row1; r += kBlock) {
    const int8_t* a = x_tiles + (r / 16) * strip;
    const int64_t rows = std::min(kBlock, row1 - r);
    for (int64_t c = j0; c < j1; c += kBlock) {
      Block32x32Int8(a, w.data.data() + (c / 16) * strip, w.k_blocks, block);
      FinishBlock(block, x_scale + r, rows, w.scale.data() + c, bias ? bias + c : nullptr,
                  std::min(kBlock, j1 - c), y + r * ldy + c, ldy);
    }
  }
  ReleaseAmxTiles();
}

}  // namespace framezip::engine::ops::cpu
