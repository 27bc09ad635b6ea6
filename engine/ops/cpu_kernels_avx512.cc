// cpu_kernels_simd.inl on 16-lane AVX-512F registers: twice the lanes and twice the registers
// of AVX2 (more weight rows per block), on Intel Xeon since Skylake-SP and AMD Zen 4. The file is
// compiled for baseline x86-64; only the code inside the target region below uses AVX-512, and
// it runs only where cpu_kernels.cc found it (CPUID and the OS's zmm state: cpu_isa.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/core/half.h"
#include "engine/ops/cpu_kernels_isa.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
// GCC 12's AVX-512 intrinsics start from a deliberately undefined register (`__Y = __Y` in
// avx512fintrin.h), which its own uninitialised-use warnings flag once inlined (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace framezip::engine::ops::cpu::avx512 {
namespace {

#include "engine/ops/cpu_vec_avx512.inl"

}  // namespace

#include "engine/ops/cpu_kernels_simd.inl"

}  // namespace framezip::engine::ops::cpu::avx512

#pragma GCC diagnostic pop
#pragma GCC pop_options
