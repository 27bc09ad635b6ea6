#include "engine/ops/cpu_isa.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/gemm_amx.h"

namespace framezip::engine::ops::cpu {
namespace {

uint64_t Xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuIsa Detect() {
  CpuIsa isa;
  if (const char* env = std::getenv("FRAMEZIP_NO_SIMD"); env != nullptr && env[0] == '1') {
    return isa;
  }
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return isa;
  const bool osxsave = (ecx & (1u << 27)) != 0;
  if (!osxsave) return isa;  // the OS saves no vector state beyond SSE: nothing wider is usable
  const bool fma = (ecx & (1u << 12)) != 0, f16c = (ecx & (1u << 29)) != 0;
  const uint64_t xcr0 = Xcr0();
  const bool ymm = (xcr0 & 0x6) == 0x6;            // SSE and AVX state
  const bool zmm = (xcr0 & 0xe6) == 0xe6;          // plus opmask, zmm0-15 high halves, zmm16-31
  const bool tiles = (xcr0 & 0x60000) == 0x60000;  // XTILECFG and XTILEDATA
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  __cpuid_count(7, 0, a7, b7, c7, d7);
  isa.avx2 = ymm && fma && f16c && (b7 & (1u << 5)) != 0;
  isa.avx512f = isa.avx2 && zmm && (b7 & (1u << 16)) != 0;
  unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  __cpuid_count(7, 1, a71, b71, c71, d71);
  isa.avx512bf16 = isa.avx512f && (a71 & (1u << 5)) != 0;
  isa.amx_bf16 = tiles && (d7 & (1u << 22)) != 0 && (d7 & (1u << 24)) != 0;
  return isa;
}

// Eight independent accumulators per thread: with an FMA latency of 4 cycles and two FMA ports,
// eight chains keep both ports busy on every recent x86 core.
constexpr int kChains = 8;

float ChainScalar(float start, float a, float b, int64_t iterations) {
  float acc[kChains];
  std::fill(acc, acc + kChains, start);
  for (int64_t i = 0; i < iterations; ++i) {
    for (float& x : acc) x = x * a + b;
  }
  float sum = 0;
  for (float x : acc) sum += x;
  return sum / kChains;
}

__attribute__((target("avx2,fma"))) float ChainAvx2(float start, float a, float b,
                                                    int64_t iterations) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  __m256 acc[kChains];
  for (__m256& x : acc) x = _mm256_set1_ps(start);
  for (int64_t i = 0; i < iterations; ++i) {
    for (__m256& x : acc) x = _mm256_fmadd_ps(x, va, vb);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  return _mm256_cvtss_f32(sum) / kChains;
}

__attribute__((target("avx512f"))) float ChainAvx512(float start, float a, float b,
                                                     int64_t iterations) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  __m512 acc[kChains];
  for (__m512& x : acc) x = _mm512_set1_ps(start);
  for (int64_t i = 0; i < iterations; ++i) {
    for (__m512& x : acc) x = _mm512_fmadd_ps(x, va, vb);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_cvtss_f32(sum) / kChains;
}

int LanesOf(const std::string& isa) { return isa == "avx512" ? 16 : isa == "avx2" ? 8 : 1; }

// kChains independent vdpbf16ps chains: acc += a·a + a·a on every lane (a rounded to bf16).
__attribute__((target("avx512f,avx512bf16"))) float ChainBf16Dot(float start, float a,
                                                                 int64_t iterations) {
  const __m512bh va = _mm512_cvtne2ps_pbh(_mm512_set1_ps(a), _mm512_set1_ps(a));
  __m512 acc[kChains];
  for (__m512& x : acc) x = _mm512_set1_ps(start);
  for (int64_t i = 0; i < iterations; ++i) {
    for (__m512& x : acc) x = _mm512_dpbf16_ps(x, va, va);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_cvtss_f32(sum) / kChains;
}

// The best of 3 timed runs of `chain` (start, iterations) on `threads` threads, its iterations
// calibrated to about `seconds` on one thread; flop_per_iteration counts every chain and lane.
template <typename Chain>
double BestChainGflops(int threads, double seconds, double flop_per_iteration, const Chain& chain) {
  int64_t iterations = 1 << 20;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    volatile float sink = chain(1.f, iterations);
    (void)sink;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= seconds / 4 || iterations > (int64_t{1} << 40)) {
      iterations =
          static_cast<int64_t>(static_cast<double>(iterations) * seconds / std::max(s, 1e-9));
      break;
    }
    iterations *= 4;
  }
  double best = 0;
  std::vector<float> sinks(static_cast<size_t>(threads));
  for (int run = 0; run < 3; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    ComputePool().ParallelFor(threads, 1, [&](int64_t t0_, int64_t t1_) {
      for (int64_t t = t0_; t < t1_; ++t) {
        sinks[static_cast<size_t>(t)] = chain(1.f + static_cast<float>(t), iterations);
      }
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flop_per_iteration * static_cast<double>(iterations) * threads / s / 1e9);
  }
  return best;
}

}  // namespace

const CpuIsa& DetectedIsa() {
  static const CpuIsa isa = Detect();
  return isa;
}

std::string IsaFeatures(const CpuIsa& isa) {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(isa.avx2, "avx2 fma f16c");
  add(isa.avx512f, "avx512f");
  add(isa.avx512bf16, "avx512_bf16");
  add(isa.amx_bf16, "amx_bf16");
  return out.empty() ? "baseline x86-64" : out;
}

std::string PeakIsa() {
  const CpuIsa& isa = DetectedIsa();
  return isa.avx512f ? "avx512" : isa.avx2 ? "avx2" : "scalar";
}

float FmaChainValue(const std::string& isa, float start, float a, float b, int64_t iterations) {
  if (isa == "avx512") return ChainAvx512(start, a, b, iterations);
  if (isa == "avx2") return ChainAvx2(start, a, b, iterations);
  return ChainScalar(start, a, b, iterations);
}

StatusOr<double> PeakFmaGflops(int threads, double seconds) {
  if (threads < 1) return InvalidArgumentError("PeakFmaGflops: {} threads", threads);
  const std::string isa = PeakIsa();
  // a slightly below 1 and b small keep the chains finite and normal for any length.
  const float a = 0.999999f, b = 1e-6f;
  return BestChainGflops(
      threads, seconds, 2.0 * kChains * LanesOf(isa),
      [&](float start, int64_t iterations) { return FmaChainValue(isa, start, a, b, iterations); });
}

float Bf16DotChainValue(float start, float a, int64_t iterations) {
  return ChainBf16Dot(start, a, iterations);
}

StatusOr<double> PeakBf16DotGflops(int threads, double seconds) {
  if (threads < 1) return InvalidArgumentError("PeakBf16DotGflops: {} threads", threads);
  if (!DetectedIsa().avx512bf16) return UnavailableError("this CPU has no AVX512-BF16");
  // a = 2^-20: each step adds 2^-39 per lane, so the chains stay finite for any length.
  return BestChainGflops(threads, seconds, 64.0 * kChains, [](float start, int64_t iterations) {
    return ChainBf16Dot(start, 0x1p-20f, iterations);
  });
}

StatusOr<double> PeakAmxBf16Gflops(int threads, double seconds) {
  if (threads < 1) return InvalidArgumentError("PeakAmxBf16Gflops: {} threads", threads);
  if (!AmxBf16Ready()) return UnavailableError("this CPU or OS offers no AMX-BF16");
  return BestChainGflops(
      threads, seconds, 4.0 * 16 * 16 * 32 * 2,
      [](float start, int64_t iterations) { return AmxTileChainValue(start, iterations); });
}

}  // namespace framezip::engine::ops::cpu
