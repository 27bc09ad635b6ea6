// The 16-lane AVX-512F vector type `V` of the per-ISA loops: cpu_kernels_simd.inl
// (cpu_kernels_avx512.cc) and paged_attention_simd.inl (paged_attention_cpu.cc) are written over
// it. Include it only inside a `#pragma GCC target` region for avx512f (plus avx2,fma,f16c), in a
// namespace of that ISA (its code must not leak into baseline x86-64 code); no include guard,
// since each includer needs its own copy.

struct V {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  // 32 zmm registers: 3×8 accumulators + 3 weights + 1 x, 6×4 + 6 + 1, or 8×2 + 8 + 1; all
  // divide the 24-row weight block of GemvRowsSimd. Eight x rows per weight conversion: the
  // bf16/f16 widening shares ports with the FMAs, and with four rows it held [16, 896] x
  // [4864, 896]^T (bf16, one Ice Lake thread) to ~45% of the FMA peak.
  static constexpr int kGroupRows = 8;
  static constexpr int RowsPerBlock(int mm) { return mm <= 2 ? 8 : mm <= 4 ? 6 : 3; }

  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Set1(float v) { return _mm512_set1_ps(v); }
  static Reg Load(const float* p) { return _mm512_loadu_ps(p); }
  // Lanes [0, n) from p, zero beyond (0 <= n <= 16); nothing past p + n is read.
  static Reg LoadFirst(const float* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
  }
  static void Store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static Reg Add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg Sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg Mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg Min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static Reg Max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg Fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg Fnmadd(Reg a, Reg b, Reg c) { return _mm512_fnmadd_ps(a, b, c); }
  static Reg Floor(Reg a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  }
  static Reg Div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg Abs(Reg a) { return _mm512_abs_ps(a); }
  static Reg SelectLess(Reg x, float limit, Reg a, Reg b) {
    return _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(x, _mm512_set1_ps(limit), _CMP_LT_OQ), a);
  }
  static Reg Int4Codes(const uint8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i codes =
        _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(codes));
  }
  // "v": any of the 32 zmm registers ("x" would confine it to the first 16).
  static void Pin(Reg& v) { __asm__("" : "+v"(v)); }
  // f16 of each lane, round to nearest even.
  static void StoreHalf(uint16_t* p, Reg v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static bool AnyNan(Reg v) { return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0; }
  static float HSum(Reg v) { return _mm512_reduce_add_ps(v); }
  static float HMax(Reg v) { return _mm512_reduce_max_ps(v); }

  template <DType T>
  static Reg LoadAs(const void* p, int64_t i) {
    if constexpr (T == DType::kF32) {
      return _mm512_loadu_ps(static_cast<const float*>(p) + i);
    } else {
      const __m256i h =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
      if constexpr (T == DType::kBF16) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      } else {
        return _mm512_cvtph_ps(h);
      }
    }
  }

  static Reg TimesPow2(Reg y, Reg n) {
    const __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
  }
  static Reg ZeroWhereLess(Reg y, Reg x, float limit) {
    const __mmask16 below = _mm512_cmp_ps_mask(x, _mm512_set1_ps(limit), _CMP_LT_OQ);
    return _mm512_mask_mov_ps(y, below, _mm512_setzero_ps());
  }
};
