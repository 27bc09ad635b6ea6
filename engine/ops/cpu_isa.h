// What this x86 CPU (and the OS) lets the engine's CPU kernels use, read once from CPUID and XCR0,
// and the machine's own compute ceiling: the FMA throughput of a tight register-only loop on the
// widest vector unit the CPU has. Benchmarks report fractions of that ceiling (a physical limit),
// not of a library's GEMM, which may itself be slow on a CPU it does not recognise.
#pragma once

#include <string>

#include "common/status.h"

namespace framezip::engine::ops::cpu {

struct CpuIsa {
  bool avx2 = false;     // with FMA and F16C: the engine's SIMD kernels
  bool avx512f = false;  // AVX-512 Foundation, with the OS saving the zmm/opmask state
  bool avx512bf16 = false;
  bool amx_bf16 = false;  // AMX tiles with bf16, with the OS saving the tile state
};

// Detected once per process (CPUID leaves 1 and 7, XGETBV); FRAMEZIP_NO_SIMD=1 reports none.
const CpuIsa& DetectedIsa();

// "avx2 fma f16c avx512f avx512_bf16 amx_bf16" for what is present, "baseline x86-64" for none.
std::string IsaFeatures(const CpuIsa& isa);

// The ISA the hand-written loops of cpu_kernels.h (GEMV, dot, axpy, exp, conversions) dispatch
// to on this machine: "avx512", "avx2" or "scalar" (defined in cpu_kernels.cc).
std::string KernelIsa();

// The widest FMA unit this machine has: "avx512", "avx2" or "scalar" (what PeakFmaGflops times).
std::string PeakIsa();

// f32 FMA throughput of `threads` threads (ComputePool) running a tight loop of independent
// vector FMAs on PeakIsa(), in GFLOP/s (one FMA = 2 FLOP), best of 3 runs of about `seconds`.
StatusOr<double> PeakFmaGflops(int threads, double seconds = 0.2);

// The loop PeakFmaGflops times, on one thread, as a value a test can check: `iterations` rounds
// of acc = acc · a + b on every lane of every accumulator, all accumulators starting at `start`;
// returns one lane of the first accumulator (all lanes and accumulators hold the same value).
float FmaChainValue(const std::string& isa, float start, float a, float b, int64_t iterations);

// bf16 dot-product throughput (AVX512-BF16 `vdpbf16ps`: 16 lanes × 2 products and 2 adds = 64
// FLOP) of `threads` threads, timed like PeakFmaGflops; UNAVAILABLE on a CPU without
// AVX512-BF16. Whether a bf16 GEMM can beat the f32 one is the ratio of this to PeakFmaGflops:
// on a Sapphire Rapids-class VM that does not expose AMX it was 0.54, so bf16 does not pay
// there (docs/cpu-backend.md).
StatusOr<double> PeakBf16DotGflops(int threads, double seconds = 0.2);

// The loop PeakBf16DotGflops times, on one thread: `iterations` rounds of acc += a·a + a·a (one
// vdpbf16ps per accumulator, `a` rounded to bf16) from acc = `start`; returns one lane of the
// first accumulator. Requires AVX512-BF16.
float Bf16DotChainValue(float start, float a, int64_t iterations);

// TDPBF16PS throughput of `threads` threads running four independent tile accumulations (16 rows
// × 16 columns × 32 products = 16384 FLOP each), timed like PeakFmaGflops: the ceiling of the AMX
// GEMM (gemm_amx.h). UNAVAILABLE where the CPU or the OS offers no AMX-BF16.
StatusOr<double> PeakAmxBf16Gflops(int threads, double seconds = 0.2);

}  // namespace framezip::engine::ops::cpu
