// The CPU features the engine detects (engine/ops/cpu_isa.h) against what the kernel reports in
// /proc/cpuinfo (Linux lists a feature only when the OS also saves its state), and the peak-FMA
// probe's loop on every vector width this machine has against an f64 evaluation of the same
// recurrence.
#include "engine/ops/cpu_isa.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

namespace framezip::engine::ops::cpu {
namespace {

std::set<std::string> CpuinfoFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::set<std::string> flags;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::stringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) flags.insert(w);
    break;
  }
  return flags;
}

TEST_CASE("Detected CPU features agree with /proc/cpuinfo", "[unit][engine][ops]") {
  const std::set<std::string> flags = CpuinfoFlags();
  if (flags.empty()) {
    std::cout << "SKIPPED: no /proc/cpuinfo flags to compare with" << std::endl;
    return;
  }
  const CpuIsa& isa = DetectedIsa();
  const bool simd_off = std::getenv("FRAMEZIP_NO_SIMD") != nullptr;
  if (simd_off) return;  // FRAMEZIP_NO_SIMD=1 reports none on purpose
  CHECK(isa.avx2 == (flags.count("avx2") && flags.count("fma") && flags.count("f16c")));
  CHECK(isa.avx512f == (isa.avx2 && flags.count("avx512f") > 0));
  CHECK(isa.avx512bf16 == (isa.avx512f && flags.count("avx512_bf16") > 0));
  CHECK(isa.amx_bf16 == (flags.count("amx_bf16") && flags.count("amx_tile")));
  CHECK(PeakIsa() == (isa.avx512f ? "avx512" : isa.avx2 ? "avx2" : "scalar"));
  INFO("features: " << IsaFeatures(isa) << "; kernels: " << KernelIsa());
  CHECK(!IsaFeatures(isa).empty());
}

TEST_CASE("The peak-FMA loop computes its recurrence on every width this CPU has",
          "[unit][engine][ops]") {
  std::vector<std::string> widths = {"scalar"};
  if (DetectedIsa().avx2) widths.push_back("avx2");
  if (DetectedIsa().avx512f) widths.push_back("avx512");
  const float start = 0.25f, a = 0.999f, b = 0.002f;
  const int64_t n = 5000;
  double want = start;  // x <- x·a + b in f64: 2 - 1.75·0.999^n here
  for (int64_t i = 0; i < n; ++i) want = want * a + b;
  for (const std::string& isa : widths) {
    CAPTURE(isa);
    // f32 rounding each step of a contracting recurrence: the error stays near eps / (1 - a).
    CHECK(FmaChainValue(isa, start, a, b, n) == Approx(want).epsilon(2e-4));
  }
  const auto gflops = PeakFmaGflops(1, 0.02);
  REQUIRE(gflops.ok());
  CHECK(std::isfinite(*gflops));
  CHECK(*gflops > 0);
  CHECK(!PeakFmaGflops(0).ok());
}

TEST_CASE("the bf16 dot-product loop adds two products per step and is timed where the CPU has it",
          "[unit][engine][ops]") {
  if (!DetectedIsa().avx512bf16) {
    CHECK(PeakBf16DotGflops(1, 0.02).status().code() == absl::StatusCode::kUnavailable);
    WARN("skipped the vdpbf16ps loop: this CPU has no AVX512-BF16");
    return;
  }
  // 0.75 is exact in bf16; each step adds 2 · 0.5625, and every partial sum up to 3000 steps is
  // exact in f32, so the loop's value is known exactly.
  const int64_t n = 3000;
  CHECK(Bf16DotChainValue(0.25f, 0.75f, n) == 0.25f + 1.125f * n);
  // A value that bf16 rounds: 1 + 2^-9 has no bf16 representation and becomes 1 (round to even).
  CHECK(Bf16DotChainValue(0.f, 1.f + 0x1p-9f, 10) == 20.f);
  const auto gflops = PeakBf16DotGflops(1, 0.02);
  REQUIRE(gflops.ok());
  CHECK(*gflops > 0);
  CHECK(!PeakBf16DotGflops(0).ok());
}

}  // namespace
}  // namespace framezip::engine::ops::cpu
