// The SIMD path of paged decode attention (paged_attention_cpu.cc), written once over a vector
// type `P` and included once per ISA inside a target region: AVX2 (8 lanes) and AVX-512
// (16 lanes) run the same algorithm, only the width differs. The includer defines, in the
// enclosing namespace, before the include, a struct `P` that extends the ISA's vector type `V`
// (cpu_vec_avx2.inl, cpu_vec_avx512.inl: Zero, Set1, Load, Store, Add, Mul, Fmadd, LoadAs) with
//
//   using Vec = V::Reg;                      // kLanes floats; d must be a multiple of kLanes
//   Vec LoadHalf(const uint16_t*);           // kLanes f16 → f32
//   template <int kBits> void Unpack(const uint8_t* block, Vec out[32 / kLanes]);
//                                            // 32 codes of one packed block, channel order
//   __m256 FoldTo8(Vec);                     // lanes i and i + 8 summed (identity on 8 lanes)
//
// and Geom, Scratch, kTile, SoftmaxUpdate and CodeRow of paged_attention_cpu.cc are visible. No
// include guard: it is meant to be included more than once.

constexpr int kVecsPerBlock = kvq::kQuantGroup / P::kLanes;

// [Σ a[0], Σ a[1], ..., Σ a[7]]: eight dot-product accumulators reduced at once (hadd tree), so
// a score costs no horizontal sum of its own.
inline __m256 Reduce8(const __m256 a[8]) {
  const __m256 h0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 h4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                       _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

// Stores the first mt of eight scores at dst.
inline void StoreScores(__m256 sum, int mt, float* dst) {
  if (mt == kTile) {
    _mm256_storeu_ps(dst, sum);
  } else {
    alignas(32) float tmp[kTile];
    _mm256_store_ps(tmp, sum);
    std::copy(tmp, tmp + mt, dst);
  }
}

// Head g's row t of a dense span: f32 in place, f16 converted into buf.
template <KvFormat F>
inline const float* DenseRow(const void* base, int64_t t, const Geom& geo, float* buf) {
  const int64_t d = geo.d, off = (t * geo.groups + geo.g) * d;
  if constexpr (F == KvFormat::kF32) {
    return static_cast<const float*>(base) + off;
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(base) + off;
    for (int64_t i = 0; i < d; i += P::kLanes) P::Store(buf + i, P::LoadHalf(h + i));
    return buf;
  }
}

// Head g's row t of a quantised span as raw codes in f32 (0..2^b-1): scales and zeros are folded
// into the query (keys) and the softmax weights (values) instead of being applied per element.
template <int kBits>
inline const float* CodeRowF32(const void* base, int64_t t, const Geom& geo, float* buf) {
  const uint8_t* codes = CodeRow(base, t, geo, kBits);
  typename P::Vec c[kVecsPerBlock];
  for (int64_t c0 = 0; c0 < geo.d; c0 += kvq::kQuantGroup) {
    P::template Unpack<kBits>(codes + c0 * kBits / 8, c);
    for (int j = 0; j < kVecsPerBlock; ++j) P::Store(buf + c0 + P::kLanes * j, c[j]);
  }
  return buf;
}

// Points rows[j] (j < m) at head g's key (or value) row t0 + j as f32 (codes for quantised
// spans): f32 spans in place, the others converted into tile[j·d ...]. Rows m..7 point at zeros.
template <KvFormat F>
inline void LoadTile(const KvSpan& span, bool key, int64_t t0, int m, const Geom& geo, float* tile,
                     const float* zeros, const float* rows[kTile]) {
  constexpr int kBits = kv::KvFormatBits(F);
  const void* base = key ? span.k : span.v;
  for (int j = 0; j < kTile; ++j) {
    if (j >= m) {
      rows[j] = zeros;
    } else if constexpr (kBits > 0) {
      rows[j] = CodeRowF32<kBits>(base, t0 + j, geo, tile + j * geo.d);
    } else {
      rows[j] = DenseRow<F>(base, t0 + j, geo, tile + j * geo.d);
    }
  }
}

// acc[r·d + c] += Σ_j p[r·ps + j] · rows[j][c] for R query heads and c in [c0, c1), the
// accumulators held in registers across the tile's tokens.
template <int R>
inline void AccumulateTile(const float* const rows[kTile], int m, const float* p, int64_t ps,
                           int64_t c0, int64_t c1, int64_t d, float* acc) {
  for (int64_t c = c0; c < c1; c += P::kLanes) {
    typename P::Vec a[R];
    for (int r = 0; r < R; ++r) a[r] = P::Load(acc + r * d + c);
    for (int j = 0; j < m; ++j) {
      const typename P::Vec v = P::Load(rows[j] + c);
      for (int r = 0; r < R; ++r) a[r] = P::Fmadd(P::Set1(p[r * ps + j]), v, a[r]);
    }
    for (int r = 0; r < R; ++r) P::Store(acc + r * d + c, a[r]);
  }
}

inline void AccumulateHeads(const float* const rows[kTile], int m, const float* p, int64_t ps,
                            int64_t c0, int64_t c1, int64_t d, int64_t rep, float* acc) {
  for (int64_t r0 = 0; r0 < rep; r0 += 4) {
    const float* pr = p + r0 * ps;
    float* a = acc + r0 * d;
    switch (std::min<int64_t>(4, rep - r0)) {
      case 4:
        AccumulateTile<4>(rows, m, pr, ps, c0, c1, d, a);
        break;
      case 3:
        AccumulateTile<3>(rows, m, pr, ps, c0, c1, d, a);
        break;
      case 2:
        AccumulateTile<2>(rows, m, pr, ps, c0, c1, d, a);
        break;
      default:
        AccumulateTile<1>(rows, m, pr, ps, c0, c1, d, a);
        break;
    }
  }
}

// Scores of a quantised span straight from the unpacked codes (no tile round trip):
// s[r·nt + t] = scale · ((q ⊙ key scale)_r · code_t + (q · key zero)_r). part: [rep, kTile, 8].
template <int kBits>
void QuantScores(const KvSpan& span, const Geom& geo, const float* qs, const float* qz, float* part,
                 float* s) {
  const int64_t nt = span.num_tokens, d = geo.d, rep = geo.rep;
  const __m256 vscale = _mm256_set1_ps(geo.scale);
  typename P::Vec c[kVecsPerBlock];
  for (int64_t t0 = 0; t0 < nt; t0 += kTile) {
    const int mt = static_cast<int>(std::min<int64_t>(kTile, nt - t0));
    for (int j = 0; j < kTile; ++j) {
      if (j >= mt) {
        for (int64_t r = 0; r < rep; ++r)
          _mm256_storeu_ps(part + (r * kTile + j) * 8, _mm256_setzero_ps());
        continue;
      }
      const uint8_t* codes = CodeRow(span.k, t0 + j, geo, kBits);
      for (int64_t c0 = 0; c0 < d; c0 += kvq::kQuantGroup) {
        P::template Unpack<kBits>(codes + c0 * kBits / 8, c);
        for (int64_t r = 0; r < rep; ++r) {
          const float* q = qs + r * d + c0;
          typename P::Vec x;
          if constexpr (kVecsPerBlock == 4) {  // two chains of two, then one add
            x = P::Add(P::Fmadd(P::Load(q + 8), c[1], P::Mul(P::Load(q), c[0])),
                       P::Fmadd(P::Load(q + 24), c[3], P::Mul(P::Load(q + 16), c[2])));
          } else {
            x = P::Fmadd(P::Load(q + 16), c[1], P::Mul(P::Load(q), c[0]));
          }
          float* pr = part + (r * kTile + j) * 8;
          __m256 x8 = P::FoldTo8(x);
          if (c0 > 0) x8 = _mm256_add_ps(x8, _mm256_loadu_ps(pr));
          _mm256_storeu_ps(pr, x8);
        }
      }
    }
    for (int64_t r = 0; r < rep; ++r) {
      __m256 a[kTile];
      for (int j = 0; j < kTile; ++j) a[j] = _mm256_loadu_ps(part + (r * kTile + j) * 8);
      StoreScores(_mm256_mul_ps(_mm256_add_ps(Reduce8(a), _mm256_set1_ps(qz[r])), vscale), mt,
                  s + r * nt + t0);
    }
  }
}

// Needs d % P::kLanes == 0 (the dispatcher sends other head sizes elsewhere).
//
// Quantised spans never dequantise an element. Keys: q·(s ⊙ code + z) = (q ⊙ s)·code + q·z, with
// q ⊙ s and q·z computed once per span. Values: Σ_t p_t (s_t code_t + z_t) = Σ_t (p_t s_t) code_t
// + (Σ_t p_t z_t), per 32-channel group; the second term is one scalar per group and head.
template <KvFormat F>
void AttendSpan(const KvSpan& span, const Geom& geo, const float* qg, Scratch& sc, float* m,
                float* l, float* acc) {
  constexpr int kBits = kv::KvFormatBits(F);
  const int64_t nt = span.num_tokens, d = geo.d, rep = geo.rep;
  float* s = sc.s.data();
  float* tile = sc.tile.data();
  const float* zeros = sc.zeros.data();
  const float* rows[kTile];
  const float* q = qg;  // per head: q (dense) or q ⊙ key scale (quantised)
  float* qz = sc.qz.data();
  if constexpr (kBits > 0) {
    for (int64_t r = 0; r < rep; ++r) {
      typename P::Vec dz = P::Zero();
      for (int64_t i = 0; i < d; i += P::kLanes) {
        const int64_t c = geo.g * d + i;
        const auto* key_scale = reinterpret_cast<const uint16_t*>(span.k_scale + c);
        const auto* key_zero = reinterpret_cast<const uint16_t*>(span.k_zero + c);
        const typename P::Vec qv = P::Load(qg + r * d + i);
        P::Store(sc.qs.data() + r * d + i, P::Mul(qv, P::LoadHalf(key_scale)));
        dz = P::Fmadd(qv, P::LoadHalf(key_zero), dz);
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, P::FoldTo8(dz));
      qz[r] = lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
    }
    q = sc.qs.data();
  }
  // Scores, eight tokens at a time.
  const __m256 vscale = _mm256_set1_ps(geo.scale);
  if constexpr (kBits > 0) QuantScores<kBits>(span, geo, q, qz, sc.part.data(), s);
  for (int64_t t0 = 0; kBits == 0 && t0 < nt; t0 += kTile) {
    const int mt = static_cast<int>(std::min<int64_t>(kTile, nt - t0));
    LoadTile<F>(span, true, t0, mt, geo, tile, zeros, rows);
    for (int64_t r = 0; r < rep; ++r) {
      typename P::Vec a[kTile];
      for (int j = 0; j < kTile; ++j) a[j] = P::Zero();
      for (int64_t c = 0; c < d; c += P::kLanes) {
        const typename P::Vec qv = P::Load(q + r * d + c);
        for (int j = 0; j < kTile; ++j) a[j] = P::Fmadd(qv, P::Load(rows[j] + c), a[j]);
      }
      __m256 a8[kTile];
      for (int j = 0; j < kTile; ++j) a8[j] = P::FoldTo8(a[j]);
      StoreScores(_mm256_mul_ps(Reduce8(a8), vscale), mt, s + r * nt + t0);
    }
  }
  SoftmaxUpdate(geo, nt, s, m, l, acc);
  // Values, eight tokens at a time, up to four query heads' accumulators in registers.
  const int64_t nb = d / kvq::kQuantGroup;
  float* zsum = sc.zsum.data();  // [rep, nb, 8]: lanes of Σ_t p_t z_t
  if constexpr (kBits > 0) std::fill(sc.zsum.begin(), sc.zsum.end(), 0.f);
  for (int64_t t0 = 0; t0 < nt; t0 += kTile) {
    const int mt = static_cast<int>(std::min<int64_t>(kTile, nt - t0));
    LoadTile<F>(span, false, t0, mt, geo, tile, zeros, rows);
    if constexpr (kBits == 0) {
      AccumulateHeads(rows, mt, s + t0, nt, 0, d, d, rep, acc);
    } else {
      const __m256i live =
          _mm256_cmpgt_epi32(_mm256_set1_epi32(mt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      float* ps = sc.ps.data();  // [rep, kTile]: p_t · s_t for one group
      for (int64_t b = 0; b < nb; ++b) {
        // The tile's value scales/zeros of group b: eight adjacent f16 (group-major layout).
        // Lanes >= mt are slots past the span (in the page, zero) and get p = 0 below.
        const int64_t at = (geo.g * nb + b) * span.v_param_stride + t0;
        const __m256 vsv =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(span.v_scale + at)));
        const __m256 vzv =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(span.v_zero + at)));
        for (int64_t r = 0; r < rep; ++r) {
          const __m256 p = _mm256_maskload_ps(s + r * nt + t0, live);
          _mm256_storeu_ps(ps + r * kTile, _mm256_mul_ps(p, vsv));
          float* z = zsum + (r * nb + b) * 8;
          _mm256_storeu_ps(z, _mm256_fmadd_ps(p, vzv, _mm256_loadu_ps(z)));
        }
        AccumulateHeads(rows, mt, ps, kTile, b * kvq::kQuantGroup, (b + 1) * kvq::kQuantGroup, d,
                        rep, acc);
      }
    }
  }
  if constexpr (kBits > 0) {
    for (int64_t r = 0; r < rep; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        const float* lanes = zsum + (r * nb + b) * 8;
        const typename P::Vec z = P::Set1(lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] +
                                          lanes[5] + lanes[6] + lanes[7]);
        float* a = acc + r * d + b * kvq::kQuantGroup;
        for (int j = 0; j < kvq::kQuantGroup; j += P::kLanes)
          P::Store(a + j, P::Add(P::Load(a + j), z));
      }
    }
  }
}

// AttendSpan for the span's format (low-rank spans are rejected before this is reached).
inline void AttendSpanOfFormat(const KvSpan& span, const Geom& geo, const float* qg, Scratch& sc,
                               float* m, float* l, float* acc) {
  switch (span.format) {
    case KvFormat::kF32:
      return AttendSpan<KvFormat::kF32>(span, geo, qg, sc, m, l, acc);
    case KvFormat::kF16:
      return AttendSpan<KvFormat::kF16>(span, geo, qg, sc, m, l, acc);
    case KvFormat::kInt4:
      return AttendSpan<KvFormat::kInt4>(span, geo, qg, sc, m, l, acc);
    case KvFormat::kInt2:
      return AttendSpan<KvFormat::kInt2>(span, geo, qg, sc, m, l, acc);
    case KvFormat::kLowRank:
      return;
  }
}
