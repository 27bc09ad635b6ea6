// Decode attention over KV spans on the CPU: one task per (sequence, KV head); the query heads of
// that group share every K/V row load. Online softmax across spans; within a span the scores of
// the whole span are computed first (a page is at most a few dozen tokens).
//
// Fused dequantisation: rows of head g are read as the loop reaches them, eight tokens at a time
// (a kTile × d tile in L1, reused for every span and shared by the H/G query heads of the group);
// no page is expanded as a whole and nothing is allocated per span. For int4/int2 spans no element
// is dequantised at all: the key scale/zero are folded into the query once per span and the value
// scale/zero into the softmax weights (see AttendSpanAvx2), so the inner loops run on the unpacked
// codes (32 per block, a few shifts/masks: ops/kv_quant.h layout). The AVX2 path dots eight key
// rows with a query at once (one reduction per eight scores) and keeps up to four heads' value
// accumulators in registers across a tile. The portable path (no AVX2, FRAMEZIP_NO_SIMD=1, or
// d % 8 != 0) dequantises row by row: the reference arithmetic.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/kv_quant.h"

#define FZ_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace framezip::engine::ops {
namespace {

using kv::KvFormat;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// What one task needs to find head g's rows in a span.
struct Geom {
  int64_t g = 0;       // KV head
  int64_t groups = 0;  // G
  int64_t d = 0;
  int64_t rep = 0;  // query heads per KV head
  float scale = 0;
};

// Tokens per tile of the AVX2 path: eight key rows are dotted with a query at once, eight value
// rows accumulated per register load of the accumulators.
constexpr int kTile = 8;

// Per-task scratch (sized once per task, reused for every span): scores [rep, page]; the
// portable path's key and value row; the AVX2 path's tile of kTile rows, a zero row, and for
// quantised spans q ⊙ key scale [rep, d], q·key zero [rep], p·value scale [rep, kTile] and
// Σ p·value zero [rep, d/32].
struct Scratch {
  std::vector<float> s, krow, vrow, zeros, tile, qs, qz, ps, zsum, part;
  void Reserve(int64_t rep, int64_t nt, int64_t d) {
    if (static_cast<int64_t>(s.size()) < rep * nt) s.resize(static_cast<size_t>(rep * nt));
    if (static_cast<int64_t>(krow.size()) < d) {
      for (auto* v : {&krow, &vrow, &zeros}) v->assign(static_cast<size_t>(d), 0.f);
      tile.resize(static_cast<size_t>(kTile * d));
      qs.resize(static_cast<size_t>(rep * d));
      qz.resize(static_cast<size_t>(rep));
      ps.resize(static_cast<size_t>(rep * kTile));
      zsum.resize(static_cast<size_t>(rep * d / 4 + 8));
      part.resize(static_cast<size_t>(rep * kTile * 8));
    }
  }
};

// Online-softmax update shared by both paths: s[r·nt + t] holds raw scaled scores; turns them into
// exp(s - m_new), rescales the running sum and accumulator of each query head.
void SoftmaxUpdate(const Geom& geo, int64_t nt, float* s, float* m, float* l, float* acc) {
  for (int64_t r = 0; r < geo.rep; ++r) {
    float* sr = s + r * nt;
    const float m_new = std::max(m[r], cpu::Max(sr, nt));
    const float corr = m[r] == kNegInf ? 0.f : std::exp(m[r] - m_new);
    l[r] = l[r] * corr + cpu::ExpShiftSum(sr, nt, m_new);
    m[r] = m_new;
    if (corr != 1.f) cpu::Scale(corr, geo.d, acc + r * geo.d);
  }
}

const uint8_t* CodeRow(const void* base, int64_t t, const Geom& geo, int bits) {
  return static_cast<const uint8_t*>(base) +
         static_cast<size_t>(t) * kvq::CodeRowBytes(geo.groups * geo.d, bits) +
         kvq::CodeRowBytes(geo.g * geo.d, bits);
}

// ---- portable path ------------------------------------------------------------------------

// Head g's row t of a span, as f32 (f32 spans are returned in place).
const float* RowScalar(const KvSpan& span, bool key, int64_t t, const Geom& geo, float* buf) {
  const void* base = key ? span.k : span.v;
  const int64_t d = geo.d, off = (t * geo.groups + geo.g) * d;
  switch (span.format) {
    case KvFormat::kF32:
      return static_cast<const float*>(base) + off;
    case KvFormat::kF16:
      for (int64_t i = 0; i < d; ++i) buf[i] = F16ToF32(static_cast<const Float16*>(base)[off + i]);
      return buf;
    case KvFormat::kInt4:
    case KvFormat::kInt2: {
      const int bits = kv::KvFormatBits(span.format);
      const uint8_t* codes = CodeRow(base, t, geo, bits);
      uint8_t block[kvq::kQuantGroup];
      for (int64_t c0 = 0; c0 < d; c0 += kvq::kQuantGroup) {
        kvq::UnpackBlock(codes + kvq::CodeRowBytes(c0, bits), bits, block);
        for (int j = 0; j < kvq::kQuantGroup; ++j) {
          const int64_t c = geo.g * d + c0 + j;  // channel in [0, G·d)
          float s, z;
          if (key) {
            s = F16ToF32(span.k_scale[c]);
            z = F16ToF32(span.k_zero[c]);
          } else {
            const int64_t gi = (c / kvq::kQuantGroup) * span.v_param_stride + t;
            s = F16ToF32(span.v_scale[gi]);
            z = F16ToF32(span.v_zero[gi]);
          }
          buf[c0 + j] = s * static_cast<float>(block[j]) + z;
        }
      }
      return buf;
    }
    case KvFormat::kLowRank:
      break;
  }
  return buf;
}

void AttendSpanScalar(const KvSpan& span, const Geom& geo, const float* qg, Scratch& sc, float* m,
                      float* l, float* acc) {
  const int64_t nt = span.num_tokens, d = geo.d;
  float* s = sc.s.data();
  for (int64_t t = 0; t < nt; ++t) {
    const float* k = RowScalar(span, true, t, geo, sc.krow.data());
    for (int64_t r = 0; r < geo.rep; ++r) {
      float dot = 0;
      for (int64_t i = 0; i < d; ++i) dot += qg[r * d + i] * k[i];
      s[r * nt + t] = geo.scale * dot;
    }
  }
  SoftmaxUpdate(geo, nt, s, m, l, acc);
  for (int64_t t = 0; t < nt; ++t) {
    const float* v = RowScalar(span, false, t, geo, sc.vrow.data());
    for (int64_t r = 0; r < geo.rep; ++r) {
      const float p = s[r * nt + t];
      for (int64_t i = 0; i < d; ++i) acc[r * d + i] += p * v[i];
    }
  }
}

// ---- AVX2 path ----------------------------------------------------------------------------

// 32 codes of one packed block as four 8-lane f32 vectors (channels 0-7, 8-15, 16-23, 24-31).
template <int kBits>
FZ_AVX2 inline void UnpackBlockAvx2(const uint8_t* in, __m256 out[4]) {
  if constexpr (kBits == 4) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(b, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    out[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    out[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
  } else {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in));
    const __m128i mask = _mm_set1_epi8(0x03);
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(b, mask)));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(b, 2), mask)));
    out[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(b, 4), mask)));
    out[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(b, 6), mask)));
  }
}

// Head g's row t of a dense span: f32 in place, f16 converted into buf.
template <KvFormat F>
FZ_AVX2 inline const float* DenseRowAvx2(const void* base, int64_t t, const Geom& geo, float* buf) {
  const int64_t d = geo.d, off = (t * geo.groups + geo.g) * d;
  if constexpr (F == KvFormat::kF32) {
    return static_cast<const float*>(base) + off;
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(base) + off;
    for (int64_t i = 0; i < d; i += 8) {
      _mm256_storeu_ps(buf + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    }
    return buf;
  }
}

// Head g's row t of a quantised span as raw codes in f32 (0..2^b-1): scales and zeros are folded
// into the query (keys) and the softmax weights (values) instead of being applied per element.
template <int kBits>
FZ_AVX2 inline const float* CodeRowAvx2(const void* base, int64_t t, const Geom& geo, float* buf) {
  const uint8_t* codes = CodeRow(base, t, geo, kBits);
  __m256 c[4];
  for (int64_t c0 = 0; c0 < geo.d; c0 += kvq::kQuantGroup) {
    UnpackBlockAvx2<kBits>(codes + c0 * kBits / 8, c);
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(buf + c0 + 8 * j, c[j]);
  }
  return buf;
}

// [Σ a[0], Σ a[1], ..., Σ a[7]]: eight dot-product accumulators reduced at once (hadd tree), so
// a score costs no horizontal sum of its own.
FZ_AVX2 inline __m256 Reduce8(const __m256 a[8]) {
  const __m256 h0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 h4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                       _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

// Points rows[j] (j < m) at head g's key (or value) row t0 + j as f32 (codes for quantised
// spans): f32 spans in place, the others converted into tile[j·d ...]. Rows m..7 point at zeros.
template <KvFormat F>
FZ_AVX2 inline void LoadTile(const KvSpan& span, bool key, int64_t t0, int m, const Geom& geo,
                             float* tile, const float* zeros, const float* rows[kTile]) {
  constexpr int kBits = kv::KvFormatBits(F);
  const void* base = key ? span.k : span.v;
  for (int j = 0; j < kTile; ++j) {
    if (j >= m) {
      rows[j] = zeros;
    } else if constexpr (kBits > 0) {
      rows[j] = CodeRowAvx2<kBits>(base, t0 + j, geo, tile + j * geo.d);
    } else {
      rows[j] = DenseRowAvx2<F>(base, t0 + j, geo, tile + j * geo.d);
    }
  }
}

// acc[r·d + c] += Σ_j p[r·ps + j] · rows[j][c] for R query heads and c in [c0, c1), the
// accumulators held in registers across the tile's tokens.
template <int R>
FZ_AVX2 inline void AccumulateTile(const float* const rows[kTile], int m, const float* p,
                                   int64_t ps, int64_t c0, int64_t c1, int64_t d, float* acc) {
  for (int64_t c = c0; c < c1; c += 8) {
    __m256 a[R];
    for (int r = 0; r < R; ++r) a[r] = _mm256_loadu_ps(acc + r * d + c);
    for (int j = 0; j < m; ++j) {
      const __m256 v = _mm256_loadu_ps(rows[j] + c);
      for (int r = 0; r < R; ++r)
        a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + r * ps + j), v, a[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + r * d + c, a[r]);
  }
}

FZ_AVX2 inline void AccumulateHeads(const float* const rows[kTile], int m, const float* p,
                                    int64_t ps, int64_t c0, int64_t c1, int64_t d, int64_t rep,
                                    float* acc) {
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
FZ_AVX2 void QuantScoresAvx2(const KvSpan& span, const Geom& geo, const float* qs, const float* qz,
                             float* part, float* s) {
  const int64_t nt = span.num_tokens, d = geo.d, rep = geo.rep;
  const __m256 vscale = _mm256_set1_ps(geo.scale);
  __m256 c[4];
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
        UnpackBlockAvx2<kBits>(codes + c0 * kBits / 8, c);
        for (int64_t r = 0; r < rep; ++r) {
          const float* q = qs + r * d + c0;
          __m256 x = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8), c[1],
                                     _mm256_mul_ps(_mm256_loadu_ps(q), c[0]));
          const __m256 y = _mm256_fmadd_ps(_mm256_loadu_ps(q + 24), c[3],
                                           _mm256_mul_ps(_mm256_loadu_ps(q + 16), c[2]));
          x = _mm256_add_ps(x, y);
          float* pr = part + (r * kTile + j) * 8;
          if (c0 > 0) x = _mm256_add_ps(x, _mm256_loadu_ps(pr));
          _mm256_storeu_ps(pr, x);
        }
      }
    }
    for (int64_t r = 0; r < rep; ++r) {
      __m256 a[kTile];
      for (int j = 0; j < kTile; ++j) a[j] = _mm256_loadu_ps(part + (r * kTile + j) * 8);
      const __m256 sum = _mm256_mul_ps(_mm256_add_ps(Reduce8(a), _mm256_set1_ps(qz[r])), vscale);
      if (mt == kTile) {
        _mm256_storeu_ps(s + r * nt + t0, sum);
      } else {
        alignas(32) float tmp[kTile];
        _mm256_store_ps(tmp, sum);
        std::copy(tmp, tmp + mt, s + r * nt + t0);
      }
    }
  }
}

// Needs d % 8 == 0 (the dispatcher sends other head sizes to the portable path).
//
// Quantised spans never dequantise an element. Keys: q·(s ⊙ code + z) = (q ⊙ s)·code + q·z, with
// q ⊙ s and q·z computed once per span. Values: Σ_t p_t (s_t code_t + z_t) = Σ_t (p_t s_t) code_t
// + (Σ_t p_t z_t), per 32-channel group; the second term is one scalar per group and head.
template <KvFormat F>
FZ_AVX2 void AttendSpanAvx2(const KvSpan& span, const Geom& geo, const float* qg, Scratch& sc,
                            float* m, float* l, float* acc) {
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
      __m256 dz = _mm256_setzero_ps();
      for (int64_t i = 0; i < d; i += 8) {
        const int64_t c = geo.g * d + i;
        const __m256 ks =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(span.k_scale + c)));
        const __m256 kz =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(span.k_zero + c)));
        const __m256 qv = _mm256_loadu_ps(qg + r * d + i);
        _mm256_storeu_ps(sc.qs.data() + r * d + i, _mm256_mul_ps(qv, ks));
        dz = _mm256_fmadd_ps(qv, kz, dz);
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, dz);
      qz[r] = lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
    }
    q = sc.qs.data();
  }
  // Scores, eight tokens at a time.
  const __m256 vscale = _mm256_set1_ps(geo.scale);
  if constexpr (kBits > 0) QuantScoresAvx2<kBits>(span, geo, q, qz, sc.part.data(), s);
  for (int64_t t0 = 0; kBits == 0 && t0 < nt; t0 += kTile) {
    const int mt = static_cast<int>(std::min<int64_t>(kTile, nt - t0));
    LoadTile<F>(span, true, t0, mt, geo, tile, zeros, rows);
    for (int64_t r = 0; r < rep; ++r) {
      __m256 a[kTile];
      for (int j = 0; j < kTile; ++j) a[j] = _mm256_setzero_ps();
      for (int64_t c = 0; c < d; c += 8) {
        const __m256 qv = _mm256_loadu_ps(q + r * d + c);
        for (int j = 0; j < kTile; ++j)
          a[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(rows[j] + c), a[j]);
      }
      __m256 sum = Reduce8(a);
      if constexpr (kBits > 0) sum = _mm256_add_ps(sum, _mm256_set1_ps(qz[r]));
      sum = _mm256_mul_ps(sum, vscale);
      if (mt == kTile) {
        _mm256_storeu_ps(s + r * nt + t0, sum);
      } else {
        alignas(32) float tmp[kTile];
        _mm256_store_ps(tmp, sum);
        std::copy(tmp, tmp + mt, s + r * nt + t0);
      }
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
        const __m256 z = _mm256_set1_ps(lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] +
                                        lanes[5] + lanes[6] + lanes[7]);
        float* a = acc + r * d + b * kvq::kQuantGroup;
        for (int j = 0; j < kvq::kQuantGroup; j += 8) {
          _mm256_storeu_ps(a + j, _mm256_add_ps(_mm256_loadu_ps(a + j), z));
        }
      }
    }
  }
}

void AttendSpan(const KvSpan& span, const Geom& geo, const float* qg, Scratch& sc, float* m,
                float* l, float* acc) {
  if (!cpu::UseAvx2() || geo.d % 8 != 0) return AttendSpanScalar(span, geo, qg, sc, m, l, acc);
  switch (span.format) {
    case KvFormat::kF32:
      return AttendSpanAvx2<KvFormat::kF32>(span, geo, qg, sc, m, l, acc);
    case KvFormat::kF16:
      return AttendSpanAvx2<KvFormat::kF16>(span, geo, qg, sc, m, l, acc);
    case KvFormat::kInt4:
      return AttendSpanAvx2<KvFormat::kInt4>(span, geo, qg, sc, m, l, acc);
    case KvFormat::kInt2:
      return AttendSpanAvx2<KvFormat::kInt2>(span, geo, qg, sc, m, l, acc);
    case KvFormat::kLowRank:
      return;  // rejected by the dispatcher
  }
}

}  // namespace

Status PagedDecodeAttentionCpu(const Tensor& q, std::span<const KvSpan> spans,
                               std::span<const int32_t> span_offsets,
                               const PagedDecodeParams& params, Tensor& out) {
  const int64_t batch = q.dim(0), heads = q.dim(1), d = q.dim(2);
  const int64_t groups = params.num_kv_heads, rep = heads / groups;
  const float scale = params.scale > 0 ? params.scale : 1.0f / std::sqrt(static_cast<float>(d));
  const float* qp = q.data<float>();
  float* op = out.data<float>();

  ComputePool().ParallelFor(batch * groups, 1, [&](int64_t t0, int64_t t1) {
    Scratch sc;
    std::vector<float> acc(static_cast<size_t>(rep * d)), m(rep), l(rep);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t b = task / groups;
      const Geom geo{task % groups, groups, d, rep, scale};
      const float* qg = qp + (b * heads + geo.g * rep) * d;
      std::fill(acc.begin(), acc.end(), 0.f);
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.f);
      for (int32_t si = span_offsets[b]; si < span_offsets[b + 1]; ++si) {
        const KvSpan& span = spans[si];
        if (span.num_tokens == 0) continue;
        sc.Reserve(rep, span.num_tokens, d);
        AttendSpan(span, geo, qg, sc, m.data(), l.data(), acc.data());
      }
      for (int64_t r = 0; r < rep; ++r) {
        float* o = op + (b * heads + geo.g * rep + r) * d;
        const float inv = l[r] > 0 ? 1.f / l[r] : 0.f;
        for (int64_t i = 0; i < d; ++i) o[i] = acc[r * d + i] * inv;
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
