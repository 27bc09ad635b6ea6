// Decode attention over KV spans on the CPU: one task per (sequence, KV head); the query heads of
// that group share every K/V row load. Online softmax across spans; within a span the scores of
// the whole span are computed first (a page is at most a few dozen tokens).
//
// Fused dequantisation: rows of head g are read as the loop reaches them, eight tokens at a time
// (a kTile × d tile in L1, reused for every span and shared by the H/G query heads of the group);
// no page is expanded as a whole and nothing is allocated per span. For int4/int2 spans no element
// is dequantised at all: the key scale/zero are folded into the query once per span and the value
// scale/zero into the softmax weights (see AttendSpan in paged_attention_simd.inl), so the inner
// loops run on the unpacked codes (32 per block, a few shifts/masks: ops/kv_quant.h layout). The
// SIMD paths (paged_attention_simd.inl, built for AVX2 and AVX-512) dot eight key rows with a query
// at once (one reduction per eight scores) and keep up to four heads' value accumulators in
// registers across a tile. The portable path (no AVX2, FRAMEZIP_NO_SIMD=1, or d % 8 != 0)
// dequantises row by row: the reference arithmetic.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/kv_quant.h"

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

// Tokens per tile of the SIMD paths: eight key rows are dotted with a query at once, eight value
// rows accumulated per register load of the accumulators.
constexpr int kTile = 8;

// Per-task scratch (sized once per task, reused for every span): scores [rep, page]; the
// portable path's key and value row; the SIMD paths' tile of kTile rows, a zero row, and for
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

// ---- SIMD paths: paged_attention_simd.inl per ISA ------------------------------------------

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace avx2 {

#include "engine/ops/cpu_vec_avx2.inl"

// V plus what the paged loops need of 8 lanes.
struct P : V {
  using Vec = Reg;
  static Vec LoadHalf(const uint16_t* h) { return LoadAs<DType::kF16>(h, 0); }
  static __m256 FoldTo8(Vec v) { return v; }
  // 32 codes of one packed block (ops/kv_quant.h layout) as channels 0-7, 8-15, 16-23, 24-31.
  template <int kBits>
  static void Unpack(const uint8_t* in, Vec out[4]) {
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
      for (int j = 0; j < 4; ++j) {
        const __m128i codes = _mm_and_si128(_mm_srli_epi16(b, 2 * j), mask);
        out[j] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(codes));
      }
    }
  }
};

#include "engine/ops/paged_attention_simd.inl"

}  // namespace avx2

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma,f16c")
// GCC 12's AVX-512 intrinsics start from a deliberately undefined register, which its own
// uninitialised-use warnings flag once inlined (GCC bug 105593; as in cpu_kernels_avx512.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace avx512 {

#include "engine/ops/cpu_vec_avx512.inl"

// V plus what the paged loops need of 16 lanes.
struct P : V {
  using Vec = Reg;
  static Vec LoadHalf(const uint16_t* h) { return LoadAs<DType::kF16>(h, 0); }
  static __m256 FoldTo8(Vec v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  }
  // 32 codes of one packed block (ops/kv_quant.h layout) as channels 0-15 and 16-31: int4 holds
  // channels 0-15 in the low nibbles of its 16 bytes, int2 channel 8j + i in bits 2j of byte i.
  template <int kBits>
  static void Unpack(const uint8_t* in, Vec out[2]) {
    if constexpr (kBits == 4) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
      const __m128i mask = _mm_set1_epi8(0x0f);
      out[0] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(b, mask)));
      out[1] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(b, 4), mask)));
    } else {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in));
      const __m128i mask = _mm_set1_epi8(0x03);
      const __m128i c01 = _mm_and_si128(_mm_unpacklo_epi64(b, _mm_srli_epi16(b, 2)), mask);
      const __m128i c23 =
          _mm_and_si128(_mm_unpacklo_epi64(_mm_srli_epi16(b, 4), _mm_srli_epi16(b, 6)), mask);
      out[0] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c01));
      out[1] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c23));
    }
  }
};

#include "engine/ops/paged_attention_simd.inl"

}  // namespace avx512

#pragma GCC diagnostic pop
#pragma GCC pop_options

// The widest path the kernels' ISA choice (cpu_kernels.h) and the head size allow: AVX-512 for
// d % 16 == 0, AVX2 for d % 8 == 0, else the portable one.
void AttendSpan(const KvSpan& span, const Geom& geo, const float* qg, Scratch& sc, float* m,
                float* l, float* acc) {
  if (cpu::UseAvx512() && geo.d % 16 == 0) {
    return avx512::AttendSpanOfFormat(span, geo, qg, sc, m, l, acc);
  }
  if (cpu::UseAvx2() && geo.d % 8 == 0) {
    return avx2::AttendSpanOfFormat(span, geo, qg, sc, m, l, acc);
  }
  AttendSpanScalar(span, geo, qg, sc, m, l, acc);
}

}  // namespace

Status PagedDecodeAttentionCpu(const Tensor& q, const PagedKv& kv, float scale, Tensor& out,
                               float* lse) {
  const int64_t batch = q.dim(0), heads = q.dim(1), d = q.dim(2);
  const int64_t groups = kv.num_kv_heads, rep = heads / groups;
  if (scale <= 0) scale = 1.0f / std::sqrt(static_cast<float>(d));
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
      for (const KvSpan& span : kv.spans_of(b)) {
        if (span.num_tokens == 0) continue;
        sc.Reserve(rep, span.num_tokens, d);
        AttendSpan(span, geo, qg, sc, m.data(), l.data(), acc.data());
      }
      for (int64_t r = 0; r < rep; ++r) {
        float* o = op + (b * heads + geo.g * rep + r) * d;
        const float inv = l[r] > 0 ? 1.f / l[r] : 0.f;
        for (int64_t i = 0; i < d; ++i) o[i] = acc[r * d + i] * inv;
        if (lse != nullptr) {
          lse[b * heads + geo.g * rep + r] = l[r] > 0 ? m[r] + std::log(l[r]) : kNegInf;
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
