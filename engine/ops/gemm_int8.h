// The CPU kernels of Linear with int8 weights (ops/quantize_int8.h): y = x · Wᵀ where W is
// symmetric int8 per output channel (W[j][k] ≈ q[j][k] · w_scale[j], q in [-128, 127]: framezip's
// quantiser stays within ±127, a checkpoint's may use -128) and x is quantised per row just
// before the product (x[i][k] ≈ xq[i][k] · x_scale[i], |xq| ≤ 127). The integer sums are exact
// (|Σ| ≤ K · 128 · 127 < 2³¹ for K < 132 000), so every kernel below gives the same int32 sum
// and differs only in the one f32 rounding of sum · x_scale · w_scale + bias.
//
// Kernels (chosen at run time; tests force each one the machine can run):
//   kAmx:        AMX-INT8 TDPBSSD on 16×64 tiles, 32×32 output blocks (prefill, vision rows);
//   kAvx512Vnni: VPDPBUSD on zmm, x offset by +128 to u8 and a per-column correction
//                -128 · Σ_k q[j][k] (exact);
//   kAvx2:       VPMADDUBSW + VPMADDWD with the sign trick (|w| · sign(w)·x; |w| ≤ 128 and
//                |x| ≤ 127 keep every pair sum below 2¹⁵, so nothing saturates: exact);
//   kScalar:     portable loops, the fallback without AVX2.
//
// Layouts (all padding is zero weight, so it adds nothing):
//   packed W: [N/16 column blocks (N padded to 32)][K/64 blocks (K padded to 64)] tiles of
//     16 rows × 64 bytes, row r of a tile holding k = 4r..4r+3 of the tile's 16 columns
//     (column c at bytes 4c..4c+3): TDPBSSD's B operand, and one zmm per k quad for VPDPBUSD.
//   quantised x: rows of K padded to 64 bytes (QuantizeRowsInt8); the AMX kernel reads them
//     repacked into 16-row × 64-byte tiles (PackInt8RowsForAmx), rows padded to 32.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace framezip::engine::ops::cpu {

enum class Int8Kernel { kScalar, kAvx2, kAvx512Vnni, kAmx };

std::string_view Int8KernelName(Int8Kernel kernel);  // "scalar", "avx2", "avx512_vnni", "amx_int8"

// Whether this machine (and OS, and FRAMEZIP_NO_SIMD / FRAMEZIP_NO_AMX) lets `kernel` run.
bool Int8KernelAvailable(Int8Kernel kernel);

// The kernel for few rows: AVX512-VNNI, else AVX2, else scalar, no wider than KernelIsa()
// (cpu_isa.h: FRAMEZIP_CPU_KERNELS narrows it).
Int8Kernel Int8GemvKernel();

// What Linear runs for int8 weights past kLinearGemvMaxRows rows: kAmx where available (and
// AmxGemmEnabled(), so FRAMEZIP_NO_AMX and ScopedF32Gemm also keep int8 off the tile unit),
// else Int8GemvKernel().
Int8Kernel Int8GemmKernel();

// A weight in the packed layout above, with what the kernels need per column. Immutable once
// made; shared by every call.
struct PackedInt8Weight {
  int64_t n = 0, k = 0;
  int64_t k_blocks = 0;           // K padded to 64, / 64
  int64_t col_blocks = 0;         // N padded to 32, / 16
  std::vector<int8_t> data;       // col_blocks · k_blocks · 1024 bytes
  std::vector<int32_t> col_sums;  // [col_blocks · 16] Σ_k q[j][k] (the VNNI correction)
  std::vector<float> scale;       // [col_blocks · 16] w_scale[j], 0 in the padding

  int64_t k_padded() const { return k_blocks * 64; }
};

// Packs q [n, k] int8 (row stride k) with its scales [n]. Columns [col_block0, col_block1) (of
// 16) only, so that callers can split the work; `out` must have been sized by
// SizePackedInt8Weight first.
void SizePackedInt8Weight(int64_t n, int64_t k, PackedInt8Weight& out);
void PackInt8Weight(const int8_t* q, const float* scale, int64_t col_block0, int64_t col_block1,
                    PackedInt8Weight& out);

// Quantises rows [row0, row1) of x (f32, row stride ldx, k values) per row: x_scale[i] =
// max|x[i]| / 127 (0 for a zero row), xq[i][k] = round_half_even(x / x_scale) in [-127, 127],
// stored at xq + i·ldq with k..ldq-1 zero (ldq ≥ k, a multiple of 64). With `offset_u8` each
// code is stored + 128 as a byte (VPDPBUSD's unsigned operand; padding then reads 128). Uses
// AVX-512 or AVX2 where present; every build rounds identically (x · (127 / max), then to even).
void QuantizeRowsInt8(const float* x, int64_t ldx, int64_t k, int64_t row0, int64_t row1,
                      bool offset_u8, int8_t* xq, int64_t ldq, float* x_scale);

// Whether `kernel` wants x quantised with offset_u8.
inline bool Int8KernelWantsOffset(Int8Kernel kernel) { return kernel == Int8Kernel::kAvx512Vnni; }

// y[i·ldy + j] = (Σ_k xq[i][k] · q[j][k]) · x_scale[i] · w.scale[j] + (bias ? bias[j] : 0) for
// i in [0, m), j in [j0, j1); j0 a multiple of 16. xq as QuantizeRowsInt8 wrote it (row stride
// w.k_padded(), offset as Int8KernelWantsOffset(kernel)). kernel is not kAmx and must be
// available. bias is f32 [n] or null.
void Int8GemvRows(Int8Kernel kernel, const int8_t* xq, const float* x_scale, int64_t m,
                  const PackedInt8Weight& w, int64_t j0, int64_t j1, const float* bias, float* y,
                  int64_t ldy);

// Bytes of the AMX tile copy of m quantised rows (rows padded to 32).
int64_t AmxInt8PackedRowsSize(int64_t m, int64_t k_padded);

// Copies 16-row blocks [block0, block1) of xq (m rows, row stride k_padded, no offset) into
// tiles; rows past m are zero.
void PackInt8RowsForAmx(const int8_t* xq, int64_t m, int64_t k_padded, int64_t block0,
                        int64_t block1, int8_t* out);

// The Int8GemvRows product for rows [row0, row1) (row0 a multiple of 32) and columns [j0, j1)
// (j0 a multiple of 32) on the tile unit, from x packed by PackInt8RowsForAmx. Requires
// Int8KernelAvailable(kAmx); configures the calling thread's tiles and releases them.
void AmxInt8Gemm(const int8_t* x_tiles, const float* x_scale, int64_t row0, int64_t row1,
                 const PackedInt8Weight& w, int64_t j0, int64_t j1, const float* bias, float* y,
                 int64_t ldy);

}  // namespace framezip::engine::ops::cpu
