// BetterBlasCore: which OpenBLAS core framezip asks for on which CPU (engine/ops/blas_core.h).
#include "engine/ops/blas_core.h"

#include <catch2/catch.hpp>

namespace framezip::engine::ops::cpu {
namespace {

CpuIsa Avx512() { return {.avx2 = true, .avx512f = true}; }
CpuIsa Avx2() { return {.avx2 = true}; }

TEST_CASE("BetterBlasCore asks for SkylakeX on an AVX-512 CPU left on older kernels", "[blas]") {
  CHECK(BetterBlasCore(Avx512(), "Prescott") == "SkylakeX");
  CHECK(BetterBlasCore(Avx512(), "Sandybridge") == "SkylakeX");
  CHECK(BetterBlasCore(Avx512(), "Haswell") == "SkylakeX");
  CHECK(BetterBlasCore(Avx512(), "Zen") == "SkylakeX");
  CHECK(BetterBlasCore(Avx512(), "unknown") == "SkylakeX");
}

TEST_CASE("BetterBlasCore keeps a core that already uses the CPU's widest units", "[blas]") {
  CHECK(BetterBlasCore(Avx512(), "SkylakeX").empty());
  CHECK(BetterBlasCore(Avx512(), "skylakex").empty());  // names compare case-insensitively
  CHECK(BetterBlasCore(Avx512(), "Cooperlake").empty());
  CHECK(BetterBlasCore(Avx512(), "SapphireRapids").empty());
  CHECK(BetterBlasCore(Avx2(), "Haswell").empty());
  CHECK(BetterBlasCore(Avx2(), "Zen").empty());
  CHECK(BetterBlasCore(Avx2(), "SkylakeX").empty());  // a user's forced choice is not undone
}

TEST_CASE("BetterBlasCore asks for Haswell on an AVX2 CPU and nothing without AVX2", "[blas]") {
  CHECK(BetterBlasCore(Avx2(), "Prescott") == "Haswell");
  CHECK(BetterBlasCore(Avx2(), "Sandybridge") == "Haswell");
  CHECK(BetterBlasCore(CpuIsa{}, "Prescott").empty());
}

TEST_CASE("BlasCoreName names the core OpenBLAS loaded", "[blas]") {
  CHECK(!BlasCoreName().empty());
  CHECK(BlasCoreName() != "unknown");
}

}  // namespace
}  // namespace framezip::engine::ops::cpu
