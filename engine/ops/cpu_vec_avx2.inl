// The 8-lane AVX2 vector type `V` of the per-ISA loops: cpu_kernels_simd.inl
// (cpu_kernels_avx2.cc) and paged_attention_simd.inl (paged_attention_cpu.cc) are written over it.
// Include it only inside a `#pragma GCC target` region for avx2,fma,f16c, in a
// namespace of that ISA (its code must not leak into baseline x86-64 code); no include guard,
// since each includer needs its own copy.

struct V {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  // 16 ymm registers: 3×4 accumulators + 3 weights + 1 x, or 4×2 + 4 + 1. With 4 x rows, 3
  // weight rows (12 accumulators) ran ~1.45x faster than 2 on Zen 3 ([16, 896] x [4864, 896]^T,
  // bf16): 8 chains could not hide the FMA latency.
  static constexpr int kGroupRows = 4;
  static constexpr int RowsPerBlock(int mm) { return mm <= 2 ? 4 : 3; }

  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Set1(float v) { return _mm256_set1_ps(v); }
  static Reg Load(const float* p) { return _mm256_loadu_ps(p); }
  // Lanes [0, n) from p, zero beyond (0 <= n <= 8); masked-off lanes are not read.
  static Reg LoadFirst(const float* p, int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
  }
  static void Store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static Reg Add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg Sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg Min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static Reg Max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg Fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg Fnmadd(Reg a, Reg b, Reg c) { return _mm256_fnmadd_ps(a, b, c); }
  static Reg Floor(Reg a) { return _mm256_floor_ps(a); }
  static Reg Div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg Abs(Reg a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static Reg SelectLess(Reg x, float limit, Reg a, Reg b) {
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, _mm256_set1_ps(limit), _CMP_LT_OQ));
  }
  static Reg Int4Codes(const uint8_t* p) {
    int32_t four = 0;
    std::memcpy(&four, p, sizeof(four));
    const __m128i b = _mm_cvtsi32_si128(four), mask = _mm_set1_epi8(0x0f);
    const __m128i codes =
        _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes));
  }
  static void Pin(Reg& v) { __asm__("" : "+x"(v)); }
  // f16 of each lane, round to nearest even (F16C).
  static void StoreHalf(uint16_t* p, Reg v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static bool AnyNan(Reg v) { return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0; }

  static float HSum(Reg v) {
    __m128 lo = _mm256_castps256_ps128(v);
    lo = _mm_add_ps(lo, _mm256_extractf128_ps(v, 1));
    __m128 sh = _mm_movehdup_ps(lo);
    lo = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, lo);
    return _mm_cvtss_f32(_mm_add_ss(lo, sh));
  }

  static float HMax(Reg v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }

  template <DType T>
  static Reg LoadAs(const void* p, int64_t i) {
    if constexpr (T == DType::kF32) {
      return _mm256_loadu_ps(static_cast<const float*>(p) + i);
    } else {
      const __m128i h =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
      if constexpr (T == DType::kBF16) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      } else {
        return _mm256_cvtph_ps(h);
      }
    }
  }

  static Reg TimesPow2(Reg y, Reg n) {
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  }
  static Reg ZeroWhereLess(Reg y, Reg x, float limit) {
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(limit), _CMP_LT_OQ), y);
  }
};
