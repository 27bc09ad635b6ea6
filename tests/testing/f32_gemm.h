// Pins Linear's many-row path to f32 sgemm for one scope. On a CPU with AMX, Linear rounds x to
// bf16 for more than 16 rows of bf16 weights (engine/ops/gemm_amx.h) but not for fewer; tests
// whose claim is that two batch shapes give the same numbers, or that the decoder equals an f32
// reference to 1e-4, state that claim for the f32 path, and test the AMX path on its own terms.
#pragma once

#include "engine/ops/gemm_amx.h"

namespace framezip::testing {

class ScopedF32Gemm {
 public:
  ScopedF32Gemm() : was_enabled_(engine::ops::cpu::AmxGemmEnabled()) {
    engine::ops::cpu::SetAmxGemmEnabled(false);
  }
  ~ScopedF32Gemm() { engine::ops::cpu::SetAmxGemmEnabled(was_enabled_); }
  ScopedF32Gemm(const ScopedF32Gemm&) = delete;
  ScopedF32Gemm& operator=(const ScopedF32Gemm&) = delete;

 private:
  bool was_enabled_;
};

}  // namespace framezip::testing
