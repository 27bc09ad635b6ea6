// Which OpenBLAS kernel set ("core") runs this process's sgemm, and the remedy when OpenBLAS does
// not recognise the CPU (docs/cpu-backend.md, "GEMM").
//
// Debian 12's OpenBLAS (0.3.21, built with DYNAMIC_ARCH) picks its core from the CPU's model
// number when the library loads. On CPUs newer than the library (Sapphire Rapids) it falls back to
// pre-AVX2 kernels that reach a fraction of the FMA peak, while the same library with
// OPENBLAS_CORETYPE=SkylakeX reaches most of it. The core can only be chosen before the library
// loads, so framezip's executables call ReexecWithFasterBlasCore first thing in main().
#pragma once

#include <string>
#include <string_view>

#include "engine/ops/cpu_isa.h"

namespace framezip::engine::ops::cpu {

// The core OpenBLAS chose for this process ("SkylakeX", "Haswell", "Prescott", ...).
std::string BlasCoreName();

// The core to request with OPENBLAS_CORETYPE on a CPU with `isa` when OpenBLAS chose `current`:
// "SkylakeX" on AVX-512 CPUs and "Haswell" on AVX2 CPUs when `current` does not use those units
// (case-insensitive), else "" (nothing to improve).
std::string BetterBlasCore(const CpuIsa& isa, std::string_view current);

// When OPENBLAS_CORETYPE is unset and BetterBlasCore names a core, sets OPENBLAS_CORETYPE to it
// and re-executes this program (/proc/self/exe) with the same argv; the new process finds the
// variable set and goes on. A user's own OPENBLAS_CORETYPE is always left alone. Returns only when
// no re-execution was needed or it failed (then a warning names the slow core).
void ReexecWithFasterBlasCore(char** argv);

}  // namespace framezip::engine::ops::cpu
