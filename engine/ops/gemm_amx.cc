#include "engine/ops/gemm_amx.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "engine/ops/cpu_isa.h"

// GCC 12's AVX-512 unpack intrinsics pass an _mm512_undefined_epi32() as the unused merge source
// of their masked builtins, which -Wmaybe-uninitialized reports inside the header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace framezip::engine::ops::cpu {
namespace {

// Linux's request for permission to use a dynamically enabled XSAVE feature, and the feature
// number of the AMX tile data (asm/prctl.h; without the grant TILELOADD faults).
constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureXtiledata = 18;

constexpr int64_t kTileRows = 16;        // rows of an A or C tile; k pairs of a B tile
constexpr int64_t kTileK = 32;           // bf16 values of k in one tile row
constexpr int64_t kTileElems = 16 * 32;  // bf16 values in one packed tile (1 KiB)
constexpr int64_t kBlock = 32;           // rows and columns of the y block in four C tiles

int64_t RoundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
int64_t KBlocks(int64_t k) { return (k + kTileK - 1) / kTileK; }

bool RequestTilePermission() {
  if (const char* env = std::getenv("FRAMEZIP_NO_AMX"); env != nullptr && env[0] == '1') {
    return false;
  }
  const CpuIsa& isa = DetectedIsa();
  if (!isa.amx_bf16 || !isa.avx512bf16) return false;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

std::atomic<bool> amx_enabled{true};

// The tile configuration (palette 1): eight tiles of 16 rows × 64 bytes. Both AMX GEMMs use them
// alike: tiles 0-3 hold a 32×32 block of y (f32 for bf16, int32 for int8), 4-5 two 16-row strips
// of x, 6-7 two 16-column strips of W.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

constexpr TileConfig EightFullTiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  return config;
}

// A namespace-scope constant rather than a local: GCC 12's _tile_loadconfig tells the compiler
// that it reads only 8 bytes, so the stores that fill a local configuration get dropped and
// LDTILECFG faults on the half-written struct.
alignas(64) constexpr TileConfig kEightFullTiles = EightFullTiles();

}  // namespace

__attribute__((target("amx-tile"))) void ConfigureAmxTiles() { _tile_loadconfig(&kEightFullTiles); }

__attribute__((target("amx-tile"))) void ReleaseAmxTiles() { _tile_release(); }

namespace {

// The 32×32 block of y at rows_packed strip `a` and columns strip `b`, over k_blocks, stored
// at `out` with a row stride of out_stride floats.
__attribute__((target("amx-tile,amx-bf16"))) void Block32x32(const uint16_t* a0, const uint16_t* b0,
                                                             int64_t k_blocks, float* out,
                                                             int64_t out_stride) {
  const uint16_t* a1 = a0 + k_blocks * kTileElems;
  const uint16_t* b1 = b0 + k_blocks * kTileElems;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    const int64_t at = kb * kTileElems;
    _tile_loadd(4, a0 + at, 64);
    _tile_loadd(6, b0 + at, 64);
    _tile_loadd(5, a1 + at, 64);
    _tile_loadd(7, b1 + at, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  const int64_t stride_bytes = out_stride * static_cast<int64_t>(sizeof(float));
  _tile_stored(0, out, stride_bytes);
  _tile_stored(1, out + 16, stride_bytes);
  _tile_stored(2, out + 16 * out_stride, stride_bytes);
  _tile_stored(3, out + 16 * out_stride + 16, stride_bytes);
}

// Transposes a 16×16 matrix of 32-bit values held in 16 registers, in place.
__attribute__((target("avx512f"))) void Transpose16x16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // In each 128-bit lane L, u[4g + j] now gets column 4L + j of rows 4g..4g+3.
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  // A 4×4 transpose of the 128-bit lanes finishes it: row 4L + j = lane L of u[j], u[4+j], ...
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
    r[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    r[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
}

__mmask32 KMask(int64_t k, int64_t kb) {
  const int64_t left = std::min<int64_t>(kTileK, k - kb * kTileK);
  return left >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint32_t{1} << left) - 1);
}

__attribute__((target("amx-tile,amx-bf16"))) void AmxChainTiles(const uint16_t* ones, float* acc,
                                                                int64_t iterations) {
  _tile_loadd(0, acc, 64);
  _tile_loadd(1, acc, 64);
  _tile_loadd(2, acc, 64);
  _tile_loadd(3, acc, 64);
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  for (int64_t i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 5);
    _tile_dpbf16ps(2, 4, 5);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, acc, 64);
}

}  // namespace

bool AmxBf16Ready() {
  static const bool ready = RequestTilePermission();
  return ready;
}

void SetAmxGemmEnabled(bool enabled) { amx_enabled.store(enabled, std::memory_order_relaxed); }
bool AmxGemmEnabled() { return AmxBf16Ready() && amx_enabled.load(std::memory_order_relaxed); }

std::string Bf16GemmPath() { return AmxGemmEnabled() ? "amx_bf16" : "sgemm"; }

int64_t AmxPackedRowsSize(int64_t rows, int64_t k) {
  return RoundUp(rows, kBlock) * KBlocks(k) * kTileK;
}

int64_t AmxPackedColumnsSize(int64_t cols, int64_t k) {
  return RoundUp(cols, kBlock) * KBlocks(k) * kTileK;
}

__attribute__((target("avx512f,avx512bf16,avx512bw"))) void PackRowsForAmx(
    const float* x, int64_t rows, int64_t k, int64_t ldx, int64_t block0, int64_t block1,
    uint16_t* out) {
  const int64_t k_blocks = KBlocks(k);
  for (int64_t b = block0; b < block1; ++b) {
    uint16_t* tiles = out + b * k_blocks * kTileElems;
    for (int64_t i = 0; i < kTileRows; ++i) {
      const int64_t row = b * kTileRows + i;
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        uint16_t* dst = tiles + kb * kTileElems + i * kTileK;
        if (row >= rows) {
          _mm512_storeu_si512(dst, _mm512_setzero_si512());
          continue;
        }
        const __mmask32 mask = KMask(k, kb);
        const float* src = x + row * ldx + kb * kTileK;
        const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), src);
        const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask >> 16), src + 16);
        _mm512_storeu_si512(dst, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
      }
    }
  }
}

__attribute__((target("avx512f,avx512bw"))) void PackBf16ColumnsForAmx(const uint16_t* w,
                                                                       int64_t cols, int64_t k,
                                                                       int64_t ldw, uint16_t* out) {
  const int64_t k_blocks = KBlocks(k);
  const int64_t col_blocks = RoundUp(cols, kBlock) / kTileRows;
  for (int64_t cb = 0; cb < col_blocks; ++cb) {
    uint16_t* tiles = out + cb * k_blocks * kTileElems;
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      // 16 columns × 32 values of k, one column per register: each register is 16 pairs of k,
      // and the tile wants pair r of all 16 columns in row r, a 16×16 transpose of 32-bit pairs.
      __m512i r[16];
      const __mmask32 mask = KMask(k, kb);
      for (int64_t c = 0; c < 16; ++c) {
        const int64_t col = cb * 16 + c;
        r[c] = col < cols ? _mm512_maskz_loadu_epi16(mask, w + col * ldw + kb * kTileK)
                          : _mm512_setzero_si512();
      }
      Transpose16x16(r);
      uint16_t* dst = tiles + kb * kTileElems;
      for (int64_t row = 0; row < 16; ++row) _mm512_storeu_si512(dst + row * kTileK, r[row]);
    }
  }
}

void AmxGemm(const uint16_t* rows_packed, int64_t row0, int64_t row1, const uint16_t* w_packed,
             int64_t cols, int64_t k, float* y, int64_t ldy) {
  const int64_t k_blocks = KBlocks(k);
  const int64_t strip = k_blocks * kTileElems;  // one 16-row (or 16-column) strip
  alignas(64) float edge[kBlock * kBlock];      // a block that overhangs y's rows or columns
  ConfigureAmxTiles();
  for (int64_t r = row0; r < row1; r += kBlock) {
    const uint16_t* a = rows_packed + (r / kTileRows) * strip;
    const int64_t valid_rows = std::min(kBlock, row1 - r);
    for (int64_t c = 0; c < cols; c += kBlock) {
      const uint16_t* b = w_packed + (c / kTileRows) * strip;
      const int64_t valid_cols = std::min(kBlock, cols - c);
      if (valid_rows == kBlock && valid_cols == kBlock) {
        Block32x32(a, b, k_blocks, y + r * ldy + c, ldy);
        continue;
      }
      Block32x32(a, b, k_blocks, edge, kBlock);
      for (int64_t i = 0; i < valid_rows; ++i) {
        std::memcpy(y + (r + i) * ldy + c, edge + i * kBlock,
                    static_cast<size_t>(valid_cols) * sizeof(float));
      }
    }
  }
  ReleaseAmxTiles();
}

float AmxTileChainValue(float start, int64_t iterations) {
  // All x and W values 2^-8: each TDPBF16PS adds 32 products of 2^-16 = 2^-11 per element.
  alignas(64) uint16_t ones[kTileElems];
  std::fill(ones, ones + kTileElems, uint16_t{0x3b80});  // bf16 2^-8
  alignas(64) float acc[16 * 16];
  std::fill(acc, acc + 256, start);
  ConfigureAmxTiles();
  AmxChainTiles(ones, acc, iterations);
  ReleaseAmxTiles();
  return acc[0];
}

}  // namespace framezip::engine::ops::cpu
