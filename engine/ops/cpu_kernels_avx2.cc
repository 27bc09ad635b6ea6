// cpu_kernels_simd.inl on 8-lane AVX2 registers (FMA, F16C): the engine's SIMD path on every
// x86-64 CPU since Haswell and Zen 1. The file is compiled for baseline x86-64; only the code
// inside the target region below uses AVX2, and it runs only where cpu_kernels.cc found it.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/core/half.h"
#include "engine/ops/cpu_kernels_isa.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace framezip::engine::ops::cpu::avx2 {
namespace {

#include "engine/ops/cpu_vec_avx2.inl"

}  // namespace

#include "engine/ops/cpu_kernels_simd.inl"

}  // namespace framezip::engine::ops::cpu::avx2

#pragma GCC pop_options
