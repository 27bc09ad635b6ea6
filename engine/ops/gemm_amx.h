// The bf16 GEMM of Linear on CPUs with AMX (Sapphire Rapids and later): y = x · Wᵀ with x f32
// rounded to bf16 (round to nearest even) and W bf16, products exact and sums in f32 inside the
// tile unit. On such a CPU one core's TDPBF16PS peak is several times its AVX-512 FMA peak, and
// the prefill GEMMs measured about 4x faster than OpenBLAS sgemm on 2 threads
// (docs/cpu-backend.md, "GEMM on AMX"). Rounding x to 16 bits is what llama.cpp's F16 path (to
// f16) and a bf16 PyTorch model (to bf16) do as well; FRAMEZIP_NO_AMX=1 keeps the f32 path.
//
// Both operands are packed first into the layout of the tile unit:
//   rows of x:     [rows/16][K/32] tiles of 16 rows × 32 bf16 (rows padded to 32, K to 32);
//   columns of W:  [cols/16][K/32] tiles of 16 pairs of k × 16 columns × 2 (TDPBF16PS's
//                  "VNNI" B operand), columns padded to 32 and K to 32.
// Padding is zeros, so it adds nothing to any sum. The kernel accumulates a 32×32 block of y in
// four tiles over the whole K, reusing each 32-row strip of x for every column pair of W.
#pragma once

#include <cstdint>
#include <string>

namespace framezip::engine::ops::cpu {

// True when the CPU has AMX-BF16 and AVX512-BF16, the OS granted this process the tile state
// (asked once, arch_prctl ARCH_REQ_XCOMP_PERM) and FRAMEZIP_NO_AMX is not 1.
bool AmxBf16Ready();

// Turns the AMX path of Linear off (or back on, where AmxBf16Ready()) for this process: the
// bench times both paths side by side, tests compare them.
void SetAmxGemmEnabled(bool enabled);
bool AmxGemmEnabled();

// Keeps Linear's many-row path on f32 sgemm for one scope and restores the previous choice on
// exit. On an AMX CPU, Linear rounds x to bf16 for more than 16 rows of bf16 weights but not for
// fewer, so a claim that two batch shapes give the same numbers, or that the decoder equals an
// f32 reference to 1e-4, holds on the f32 path: tests of such claims and the bench's side-by-side
// timing pin it with this.
class ScopedF32Gemm {
 public:
  ScopedF32Gemm() : was_enabled_(AmxGemmEnabled()) { SetAmxGemmEnabled(false); }
  ~ScopedF32Gemm() { SetAmxGemmEnabled(was_enabled_); }
  ScopedF32Gemm(const ScopedF32Gemm&) = delete;
  ScopedF32Gemm& operator=(const ScopedF32Gemm&) = delete;

 private:
  bool was_enabled_;
};

// What Linear's many-row path runs for bf16 weights on this machine now: "amx_bf16" or "sgemm"
// (`framezip version`, bench output).
std::string Bf16GemmPath();

// Padded sizes of the packed operands, in bf16 elements.
int64_t AmxPackedRowsSize(int64_t rows, int64_t k);
int64_t AmxPackedColumnsSize(int64_t cols, int64_t k);

// Packs rows [0, rows) of x (f32, row stride ldx) into `out` (AmxPackedRowsSize elements),
// rounding to bf16. Row blocks [block0, block1) of 16 rows only, so that callers can split the
// work: blocks = ceil(rows_padded / 16).
void PackRowsForAmx(const float* x, int64_t rows, int64_t k, int64_t ldx, int64_t block0,
                    int64_t block1, uint16_t* out);

// Packs columns [0, cols) of Wᵀ, i.e. rows of W (bf16 bit patterns, row stride ldw), into `out`
// (AmxPackedColumnsSize elements).
void PackBf16ColumnsForAmx(const uint16_t* w, int64_t cols, int64_t k, int64_t ldw, uint16_t* out);

// y[r·ldy + c] = Σ_k x[r][k]·W[c][k] for r in [row0, row1) and c in [0, cols), from packed
// operands (`rows_packed` of x packed by PackRowsForAmx with `k`; `w_packed` from
// PackBf16ColumnsForAmx with `cols` and `k`). row0 must be a multiple of 32. Requires
// AmxBf16Ready(); configures the tile unit of the calling thread and releases it on return.
void AmxGemm(const uint16_t* rows_packed, int64_t row0, int64_t row1, const uint16_t* w_packed,
             int64_t cols, int64_t k, float* y, int64_t ldy);

// Loads the calling thread's tile configuration both AMX GEMMs use (palette 1, eight tiles of
// 16 rows × 64 bytes), and releases it. Requires the AMX tile state (AmxBf16Ready, or the int8
// GEMM's own check).
void ConfigureAmxTiles();
void ReleaseAmxTiles();

// The loop cpu::PeakAmxBf16Gflops (cpu_isa.h) times, on the calling thread, as a value a test
// can check: `iterations` rounds of four independent TDPBF16PS on tiles of x = W = 2^-8 (each
// adds 32 · 2^-16 = 2^-11 to every element), from every element = `start`; returns one element.
// Requires AmxBf16Ready().
float AmxTileChainValue(float start, int64_t iterations);

}  // namespace framezip::engine::ops::cpu
