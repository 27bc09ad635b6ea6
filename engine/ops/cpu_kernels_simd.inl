// The bodies of the vectorised CPU loops (cpu_kernels.h), written once over a vector type `V`
// and compiled once per ISA: cpu_kernels_avx2.cc and cpu_kernels_avx512.cc each define V (8 or
// 16 f32 lanes) inside their own `#pragma GCC target` region and include this file, so both
// ISAs run the same algorithm with the same blocking and only the register width differs.
//
// V provides:
//   - Reg, kLanes; Zero, Set1, Load, LoadFirst (the first n lanes, zero beyond), Store; Add, Sub,
//   Mul, Div, Min, Max, Abs, Fmadd, Fnmadd,
//     Floor; HSum and HMax (across lanes);
//   - LoadAs<T> (kLanes weights of dtype T from element i, as f32) and Int4Codes (kLanes 4-bit
//     codes from kLanes/2 bytes, low nibble first, as f32);
//   - TimesPow2 (y·2^n for integral-valued f32 n), ZeroWhereLess (0 where x < limit) and
//     SelectLess (a where x < limit, else b);
//   - Pin (keeps a value in a register);
//   - kGroupRows (rows of x per GEMV register block, a power of 2) and RowsPerBlock(MM) (weight
//     rows per register block for MM <= kGroupRows rows of x).
//
// Included inside the ISA's namespace (cpu::avx2, cpu::avx512), after V: the loops have
// internal linkage, so the two ISAs' instantiations never meet at link time, and the file ends
// with that namespace's entry points (cpu_kernels_isa.h).

namespace {

template <DType T>
void ToF32Simd(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::Store(dst + i, V::template LoadAs<T>(src, i));
  for (; i < n; ++i) dst[i] = LoadAsF32(src, T, i);
}

float DotSimd(const float* a, const float* b, int64_t n) {
  constexpr int64_t L = V::kLanes;
  typename V::Reg acc0 = V::Zero(), acc1 = V::Zero();
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    acc0 = V::Fmadd(V::Load(a + i), V::Load(b + i), acc0);
    acc1 = V::Fmadd(V::Load(a + i + L), V::Load(b + i + L), acc1);
  }
  for (; i + L <= n; i += L) acc0 = V::Fmadd(V::Load(a + i), V::Load(b + i), acc0);
  float s = V::HSum(V::Add(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float SumSimd(const float* x, int64_t n) {
  constexpr int64_t L = V::kLanes;
  typename V::Reg acc0 = V::Zero(), acc1 = V::Zero();
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    acc0 = V::Add(acc0, V::Load(x + i));
    acc1 = V::Add(acc1, V::Load(x + i + L));
  }
  for (; i + L <= n; i += L) acc0 = V::Add(acc0, V::Load(x + i));
  float s = V::HSum(V::Add(acc0, acc1));
  for (; i < n; ++i) s += x[i];
  return s;
}

void AxpySimd(float alpha, const float* x, int64_t n, float* y) {
  const typename V::Reg va = V::Set1(alpha);
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    V::Store(y + i, V::Fmadd(va, V::Load(x + i), V::Load(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// R weight rows × MM rows of x at a time: R·MM independent accumulators hide FMA latency, and
// each weight load is converted once and used MM times.
//
// Register plan: R·MM accumulators, the R converted weight vectors, one x vector (16 ymm for
// AVX2, 32 zmm for AVX-512: V::RowsPerBlock). Each x vector is loaded once into a register and
// used R times; V::Pin keeps the compiler from folding the load into every FMA as a memory
// operand instead (R loads of the same x per k step). On Zen 3 cores the folded form ran 3×4
// at ~50 GFLOP/s per core and this one at ~80, with the same FMAs in the same order.
//
// With kPrefetch, the R rows `prefetch_rows` ahead are fetched into L2 as the loop goes, one
// cache line per row per 64 bytes of weights (see GemvRowsSimd).
template <DType T, int R, int MM, bool kPrefetch = false>
void GemvBlock(const float* x, int64_t ldx, const void* w, int64_t K, int64_t j, float* y,
               int64_t ldy, int64_t prefetch_rows = 0) {
  constexpr int64_t kWeightSize = T == DType::kF32 ? 4 : 2;
  constexpr int64_t kLineElems = 64 / kWeightSize;
  constexpr int64_t L = V::kLanes;
  const char* pf = static_cast<const char*>(w) + (j + prefetch_rows) * K * kWeightSize;
  typename V::Reg acc[R][MM];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MM; ++m) acc[r][m] = V::Zero();
  int64_t k = 0;
  for (; k + L <= K; k += L) {
    if constexpr (kPrefetch) {
      if (k % kLineElems == 0) {
        for (int r = 0; r < R; ++r) _mm_prefetch(pf + (r * K + k) * kWeightSize, _MM_HINT_T1);
      }
    }
    typename V::Reg wv[R];
    for (int r = 0; r < R; ++r) wv[r] = V::template LoadAs<T>(w, (j + r) * K + k);
    for (int m = 0; m < MM; ++m) {
      typename V::Reg xv = V::Load(x + m * ldx + k);
      V::Pin(xv);
      for (int r = 0; r < R; ++r) acc[r][m] = V::Fmadd(wv[r], xv, acc[r][m]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < MM; ++m) {
      float s = V::HSum(acc[r][m]);
      for (int64_t kk = k; kk < K; ++kk) s += x[m * ldx + kk] * LoadAsF32(w, T, (j + r) * K + kk);
      y[m * ldy + j + r] = s;
    }
  }
}

// The accumulation order of each output is the same whatever R, MM or the batch size, so results
// do not depend on how many rows are batched.
//
// prefetch_rows > 0: while computing rows [j0, j1), fetch the rows prefetch_rows further on, up
// to row `prefetch_end` (exclusive).
template <DType T, int MM>
void GemvRowsMM(const float* x, int64_t ldx, const void* w, int64_t K, int64_t j0, int64_t j1,
                float* y, int64_t ldy, int64_t prefetch_rows = 0, int64_t prefetch_end = 0) {
  constexpr int R = V::RowsPerBlock(MM);
  int64_t j = j0;
  for (; j + R <= j1; j += R) {
    if (prefetch_rows > 0 && j + prefetch_rows + R <= prefetch_end) {
      GemvBlock<T, R, MM, true>(x, ldx, w, K, j, y, ldy, prefetch_rows);
    } else {
      GemvBlock<T, R, MM>(x, ldx, w, K, j, y, ldy);
    }
  }
  for (; j < j1; ++j) GemvBlock<T, 1, MM>(x, ldx, w, K, j, y, ldy);
}

// Rows [m0, m0 + count) of x over weight rows [jb, je), count < 2·MM: MM rows at a time while
// they last, then the rest with the next smaller MM (the tail of a batch that is not a multiple
// of V::kGroupRows). Each call prefetches the next weight block, as the last pass over a block.
template <DType T, int MM>
void GemvRowsTail(const float* x, int64_t ldx, const void* w, int64_t K, int64_t jb, int64_t je,
                  int64_t j1, float* y, int64_t ldy, int64_t count, int64_t prefetch_rows) {
  if constexpr (MM >= 1) {
    if (count >= MM) {
      GemvRowsMM<T, MM>(x, ldx, w, K, jb, je, y, ldy, prefetch_rows, j1);
      x += MM * ldx;
      y += MM * ldy;
      count -= MM;
    }
    if constexpr (MM > 1) {
      GemvRowsTail<T, MM / 2>(x, ldx, w, K, jb, je, j1, y, ldy, count, prefetch_rows);
    }
  }
}

// Weight rows are taken kRowBlock at a time and every group of V::kGroupRows x rows runs over
// the block before the next one: the block (24 rows, <= 240 KB for K <= 4864 in bf16) stays in
// L1/L2, so the weights are read from memory once per call, not once per group — batched decode
// (M = 16) would otherwise stream them M / kGroupRows times. The last group's pass over a block
// also prefetches the next block into L2, so the first pass over it does not wait on memory:
// with two Zen 3 threads, [16, 896] x [4864, 896]^T went from ~90 to ~110-125 GFLOP/s.
template <DType T>
void GemvRowsSimd(const float* x, int64_t M, int64_t ldx, const void* w, int64_t K, int64_t j0,
                  int64_t j1, float* y, int64_t ldy) {
  constexpr int G = V::kGroupRows;
  constexpr int64_t kRowBlock = 24;  // a multiple of every V::RowsPerBlock
  static_assert(kRowBlock % V::RowsPerBlock(1) == 0 && kRowBlock % V::RowsPerBlock(G) == 0);
  const int64_t full_groups = M / G, rest = M % G;
  for (int64_t jb = j0; jb < j1; jb += kRowBlock) {
    const int64_t je = std::min(j1, jb + kRowBlock);
    for (int64_t g = 0; g < full_groups; ++g) {
      const bool last = rest == 0 && g + 1 == full_groups;
      GemvRowsMM<T, G>(x + g * G * ldx, ldx, w, K, jb, je, y + g * G * ldy, ldy,
                       last ? kRowBlock : 0, j1);
    }
    const int64_t m = full_groups * G;
    GemvRowsTail<T, G / 2>(x + m * ldx, ldx, w, K, jb, je, j1, y + m * ldy, ldy, rest, kRowBlock);
  }
}

void GemvRowsAnyType(const float* x, int64_t M, int64_t ldx, const void* w, DType wdtype, int64_t K,
                     int64_t j0, int64_t j1, float* y, int64_t ldy) {
  switch (wdtype) {
    case DType::kBF16:
      return GemvRowsSimd<DType::kBF16>(x, M, ldx, w, K, j0, j1, y, ldy);
    case DType::kF16:
      return GemvRowsSimd<DType::kF16>(x, M, ldx, w, K, j0, j1, y, ldy);
    default:
      return GemvRowsSimd<DType::kF32>(x, M, ldx, w, K, j0, j1, y, ldy);
  }
}

// exp(x) on every lane, Cephes expf polynomial (max rel. error ~2 ulp); x < -87 gives 0.
typename V::Reg Exp(typename V::Reg x0) {
  typename V::Reg x = V::Min(x0, V::Set1(88.3762626647949f));
  x = V::Max(x, V::Set1(-87.0f));
  typename V::Reg fx = V::Floor(V::Fmadd(x, V::Set1(1.44269504088896341f), V::Set1(0.5f)));
  x = V::Fnmadd(fx, V::Set1(0.693359375f), x);
  x = V::Fnmadd(fx, V::Set1(-2.12194440e-4f), x);
  typename V::Reg y = V::Set1(1.9875691500E-4f);
  y = V::Fmadd(y, x, V::Set1(1.3981999507E-3f));
  y = V::Fmadd(y, x, V::Set1(8.3334519073E-3f));
  y = V::Fmadd(y, x, V::Set1(4.1665795894E-2f));
  y = V::Fmadd(y, x, V::Set1(1.6666665459E-1f));
  y = V::Fmadd(y, x, V::Set1(5.0000001201E-1f));
  y = V::Fmadd(y, V::Mul(x, x), V::Add(x, V::Set1(1.0f)));
  return V::ZeroWhereLess(V::TimesPow2(y, fx), x0, -87.0f);
}

float MaxSimd(const float* x, int64_t n) {
  constexpr int64_t L = V::kLanes;
  float m = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  if (n >= L) {
    typename V::Reg a = V::Load(x), b = a;
    for (i = L; i + 2 * L <= n; i += 2 * L) {
      a = V::Max(a, V::Load(x + i));
      b = V::Max(b, V::Load(x + i + L));
    }
    for (; i + L <= n; i += L) a = V::Max(a, V::Load(x + i));
    m = V::HMax(V::Max(a, b));
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

float ExpShiftSumSimd(float* s, int64_t n, float max) {
  const typename V::Reg vm = V::Set1(max);
  typename V::Reg acc = V::Zero();
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    const typename V::Reg e = Exp(V::Sub(V::Load(s + i), vm));
    V::Store(s + i, e);
    acc = V::Add(acc, e);
  }
  float sum = V::HSum(acc);
  for (; i < n; ++i) {
    s[i] = ExpShifted(s[i], max);
    sum += s[i];
  }
  return sum;
}

// y = f(a, b) on every V-wide chunk of [0, n); the last partial chunk goes through a zero-padded
// copy, so each element gets the same arithmetic wherever it sits (a row's activations do not
// depend on the length of the tensor it is part of).
template <typename F>
void MapVectors(const float* a, const float* b, int64_t n, float* y, const F& f) {
  constexpr int64_t L = V::kLanes;
  int64_t i = 0;
  for (; i + L <= n; i += L) V::Store(y + i, f(V::Load(a + i), V::Load(b + i)));
  if (i < n) {
    float ta[L] = {}, tb[L] = {}, ty[L];
    std::memcpy(ta, a + i, static_cast<size_t>(n - i) * sizeof(float));
    std::memcpy(tb, b + i, static_cast<size_t>(n - i) * sizeof(float));
    V::Store(ty, f(V::Load(ta), V::Load(tb)));
    std::memcpy(y + i, ty, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// 1 / (1 + e^-z); e^-z saturates at e^88.4 and flushes below e^-87, so the result stays finite.
typename V::Reg Sigmoid(typename V::Reg z) {
  const typename V::Reg one = V::Set1(1.0f);
  return V::Div(one, V::Add(one, Exp(V::Sub(V::Zero(), z))));
}

// The element-wise functions are structs, not lambdas: GCC does not carry the file's target
// region over to a lambda's generated static invoker, which would then pass V::Reg by an ABI
// the region does not use.
struct SiluTimes {
  typename V::Reg operator()(typename V::Reg g, typename V::Reg u) const {
    return V::Mul(V::Mul(g, Sigmoid(g)), u);
  }
};

// x/2 · (1 + tanh(u)) with u = √(2/π)(x + 0.044715x³) is x · σ(2u): one exp, no tanh.
struct GeluTanhOf {
  typename V::Reg operator()(typename V::Reg v, typename V::Reg) const {
    const typename V::Reg v3 = V::Mul(V::Mul(v, v), v);
    const typename V::Reg u =
        V::Mul(V::Set1(0.79788456080286536f), V::Fmadd(V::Set1(0.044715f), v3, v));
    return V::Mul(v, Sigmoid(V::Add(u, u)));
  }
};

// x/2 · (1 + erf(x/√2)) with erf from Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7): for
// a = |z|, 1 - erf(a) = t·(a1 + t(a2 + t(a3 + t(a4 + t·a5))))·e^(-a²), t = 1/(1 + p·a). The
// complement is computed directly, so 1 + erf(z) keeps its precision for negative z.
struct GeluErfOf {
  typename V::Reg operator()(typename V::Reg v, typename V::Reg) const {
    const typename V::Reg z = V::Mul(v, V::Set1(0.70710678118654752f));
    const typename V::Reg a = V::Abs(z);
    const typename V::Reg one = V::Set1(1.0f);
    const typename V::Reg t = V::Div(one, V::Fmadd(V::Set1(0.3275911f), a, one));
    typename V::Reg poly = V::Set1(1.061405429f);
    poly = V::Fmadd(poly, t, V::Set1(-1.453152027f));
    poly = V::Fmadd(poly, t, V::Set1(1.421413741f));
    poly = V::Fmadd(poly, t, V::Set1(-0.284496736f));
    poly = V::Fmadd(poly, t, V::Set1(0.254829592f));
    const typename V::Reg erfc = V::Mul(V::Mul(poly, t), Exp(V::Sub(V::Zero(), V::Mul(a, a))));
    // 1 + erf(z): erfc(|z|) for z < 0, 2 - erfc(|z|) otherwise.
    const typename V::Reg one_plus_erf = V::SelectLess(z, 0.0f, erfc, V::Sub(V::Set1(2.0f), erfc));
    return V::Mul(V::Mul(V::Set1(0.5f), v), one_plus_erf);
  }
};

// AttentionPack's key scores, one token per lane (cpu_kernels.h, LowRankScoreLanes), for the
// lanes [lane0, lane0 + kLanes) of a 16-token tile. Each pair (c, c + d/2) of a head is rebuilt
// for all lanes at once — two chains of R multiply-adds against broadcast Vᵀ entries, with the R
// columns of U·S held in registers — rotated, and folded into each query head's score: no
// horizontal sums, no key row ever stored. The rank and the group size are template constants
// where they are the common ones (0: read at run time), so every accumulator stays in a register:
// a run-time index puts them on the stack, which cost a third of the loop's time.
template <int kRank, int kGroup>
void ScoreLanes(const float* ut, const float* vt, int64_t rank_rt, int64_t kv_heads, int64_t d,
                int64_t group_rt, const float* q, float scale, const float* cos, const float* sin,
                float* scores, int64_t ld, int64_t n, int64_t lane0) {
  constexpr int64_t L = V::kLanes, W = kLowRankLanes;
  constexpr int kMaxGroup = kGroup > 0 ? kGroup : static_cast<int>(kLowRankMaxGroup);
  const int64_t rank = kRank > 0 ? kRank : rank_rt;
  const int64_t group = kGroup > 0 ? kGroup : group_rt;
  const int64_t hd = kv_heads * d, half = d / 2;
  typename V::Reg u[kRank > 0 ? kRank : 1];
  if constexpr (kRank > 0) {
    for (int j = 0; j < kRank; ++j) u[j] = V::Load(ut + j * W + lane0);
  }
  for (int64_t g = 0; g < kv_heads; ++g) {
    // A head's score sums the two halves of each pair in two accumulators: one chain of
    // dependent multiply-adds per pair would bound the loop at twice the latency.
    typename V::Reg acc[kMaxGroup], acc_b[kMaxGroup];
    for (int r = 0; r < kMaxGroup; ++r) acc[r] = acc_b[r] = V::Zero();
    const float* vg = vt + g * d;
    const float* qg = q + g * group * d;
    for (int64_t c = 0; c < half; ++c) {
      typename V::Reg a = V::Zero(), b = V::Zero();
      for (int64_t j = 0; j < rank; ++j) {
        const typename V::Reg uj = kRank > 0 ? u[j] : V::Load(ut + j * W + lane0);
        a = V::Fmadd(uj, V::Set1(vg[j * hd + c]), a);
        b = V::Fmadd(uj, V::Set1(vg[j * hd + c + half]), b);
      }
      const typename V::Reg co = V::Load(cos + c * W + lane0), si = V::Load(sin + c * W + lane0);
      const typename V::Reg ra = V::Fnmadd(b, si, V::Mul(a, co));
      const typename V::Reg rb = V::Fmadd(a, si, V::Mul(b, co));
      for (int r = 0; r < kMaxGroup; ++r) {
        if (kGroup == 0 && r >= group) break;
        const float* qh = qg + r * d;
        acc[r] = V::Fmadd(V::Set1(qh[c]), ra, acc[r]);
        acc_b[r] = V::Fmadd(V::Set1(qh[c + half]), rb, acc_b[r]);
      }
    }
    alignas(64) float lanes[L];
    for (int64_t r = 0; r < group; ++r) {
      V::Store(lanes, V::Mul(V::Add(acc[r], acc_b[r]), V::Set1(scale)));
      float* out = scores + (g * group + r) * ld + lane0;
      for (int64_t l = 0; l < std::min<int64_t>(L, n - lane0); ++l) out[l] = lanes[l];
    }
  }
}

template <int kRank>
void ScoreLanesOfGroup(const float* ut, const float* vt, int64_t rank, int64_t kv_heads, int64_t d,
                       int64_t group, const float* q, float scale, const float* cos,
                       const float* sin, float* scores, int64_t ld, int64_t n, int64_t lane0) {
  switch (group) {
    case 1:
      return ScoreLanes<kRank, 1>(ut, vt, rank, kv_heads, d, group, q, scale, cos, sin, scores, ld,
                                  n, lane0);
    case 2:
      return ScoreLanes<kRank, 2>(ut, vt, rank, kv_heads, d, group, q, scale, cos, sin, scores, ld,
                                  n, lane0);
    case 4:
      return ScoreLanes<kRank, 4>(ut, vt, rank, kv_heads, d, group, q, scale, cos, sin, scores, ld,
                                  n, lane0);
    default:
      return ScoreLanes<kRank, 0>(ut, vt, rank, kv_heads, d, group, q, scale, cos, sin, scores, ld,
                                  n, lane0);
  }
}

void LowRankScoreLanesSimd(const float* ut, const float* vt, int64_t rank, int64_t kv_heads,
                           int64_t d, int64_t heads, const float* q, float scale, const float* cos,
                           const float* sin, float* scores, int64_t ld, int64_t n) {
  const int64_t group = heads / kv_heads;
  for (int64_t lane0 = 0; lane0 < n; lane0 += V::kLanes) {
    switch (rank) {  // the ranks AttentionPack's options default to
      case 8:
        ScoreLanesOfGroup<8>(ut, vt, rank, kv_heads, d, group, q, scale, cos, sin, scores, ld, n,
                             lane0);
        break;
      case 16:
        ScoreLanesOfGroup<16>(ut, vt, rank, kv_heads, d, group, q, scale, cos, sin, scores, ld, n,
                              lane0);
        break;
      default:
        ScoreLanesOfGroup<0>(ut, vt, rank, kv_heads, d, group, q, scale, cos, sin, scores, ld, n,
                             lane0);
    }
  }
}

// cos/sin[c·W + l] = the angle of base c turned by lane angle (c, l) (cpu_kernels.h, TurnLanes).
void TurnLanesSimd(const float* base_cos, const float* base_sin, const float* lane_cos,
                   const float* lane_sin, int64_t pairs, float* cos, float* sin) {
  constexpr int64_t W = kLowRankLanes;
  for (int64_t c = 0; c < pairs; ++c) {
    const typename V::Reg bc = V::Set1(base_cos[c]), bs = V::Set1(base_sin[c]);
    for (int64_t l = 0; l < W; l += V::kLanes) {
      const typename V::Reg lc = V::Load(lane_cos + c * W + l), ls = V::Load(lane_sin + c * W + l);
      V::Store(cos + c * W + l, V::Fnmadd(bs, ls, V::Mul(bc, lc)));
      V::Store(sin + c * W + l, V::Fmadd(bc, ls, V::Mul(bs, lc)));
    }
  }
}

// z[h·rank + j] += Σ_i w[h·ldw + i] · u[i·rank + j] for j < ranks[i] (cpu_kernels.h): lanes of
// the rank dimension, four heads' accumulators at a time, tokens innermost so each u row is loaded
// once per four heads; a token's rows beyond its rank are masked loads, never read.
void WeightedRowsSumSimd(const float* w, int64_t ldw, int64_t heads, const float* u, int64_t rank,
                         const uint16_t* ranks, int64_t n, float* z) {
  constexpr int64_t L = V::kLanes;
  constexpr int64_t kHeads = 4;
  for (int64_t j0 = 0; j0 < rank; j0 += L) {
    const int64_t width = std::min<int64_t>(L, rank - j0);
    for (int64_t h0 = 0; h0 < heads; h0 += kHeads) {
      const int64_t hn = std::min(kHeads, heads - h0);
      typename V::Reg acc[kHeads] = {V::Zero(), V::Zero(), V::Zero(), V::Zero()};
      for (int64_t i = 0; i < n; ++i) {
        const int64_t lanes = std::min<int64_t>(width, int64_t{ranks[i]} - j0);
        if (lanes <= 0) continue;
        const float* row = u + i * rank + j0;
        const typename V::Reg x = lanes == L ? V::Load(row) : V::LoadFirst(row, int(lanes));
        for (int64_t k = 0; k < hn; ++k) {
          acc[k] = V::Fmadd(V::Set1(w[(h0 + k) * ldw + i]), x, acc[k]);
        }
      }
      alignas(64) float sums[L];
      for (int64_t k = 0; k < hn; ++k) {
        V::Store(sums, acc[k]);
        float* zh = z + (h0 + k) * rank + j0;
        for (int64_t j = 0; j < width; ++j) zh[j] += sums[j];
      }
    }
  }
}

// out[c] = (code(first + c) - 8) · scale[c] for symmetric int4 codes packed two per byte, low
// nibble first (kv/low_rank_factor.h); `first` even, so each vector starts on a byte.
void DequantizeInt4RowSimd(const uint8_t* packed, int64_t first, int64_t n, const float* scale,
                           float* out) {
  constexpr int64_t L = V::kLanes;
  const uint8_t* bytes = packed + first / 2;
  int64_t c = 0;
  for (; c + L <= n; c += L) {
    const typename V::Reg code = V::Sub(V::Int4Codes(bytes + c / 2), V::Set1(8.0f));
    V::Store(out + c, V::Mul(code, V::Load(scale + c)));
  }
  for (; c < n; ++c) out[c] = static_cast<float>(Int4Code(bytes, c) - 8) * scale[c];
}

// kvq::QuantizeOne on whole vectors: (x - zero) / scale (0 where scale <= 0), clamped to
// [0, levels], plus 0.5, truncated: the scalar function's f32 operations in the same order.
void QuantizeCodesSimd(const float* x, const float* scale, const float* zero, int64_t stride,
                       int64_t n, int bits, uint8_t* codes) {
  constexpr int64_t L = V::kLanes;
  const typename V::Reg levels = V::Set1(static_cast<float>((1 << bits) - 1));
  const typename V::Reg half = V::Set1(0.5f), none = V::Zero();
  alignas(64) float rounded[L];
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const typename V::Reg s = stride != 0 ? V::Load(scale + i) : V::Set1(scale[0]);
    const typename V::Reg z = stride != 0 ? V::Load(zero + i) : V::Set1(zero[0]);
    typename V::Reg c = V::Div(V::Sub(V::Load(x + i), z), s);
    c = V::SelectLess(V::Sub(none, s), 0.f, c, none);  // -s < 0: scale > 0
    V::Store(rounded, V::Add(V::Min(V::Max(c, none), levels), half));
    for (int64_t l = 0; l < L; ++l) codes[i + l] = static_cast<uint8_t>(rounded[l]);
  }
  for (; i < n; ++i) codes[i] = kvq::QuantizeOne(x[i], scale[i * stride], zero[i * stride], bits);
}

// The hardware conversion rounds like F32ToF16 (to nearest even, overflow to inf, subnormals
// kept) but keeps a NaN's payload where F32ToF16 writes the canonical quiet NaN, so a vector
// holding a NaN is redone by the scalar function: the same bits on every path.
void ToF16Simd(const float* src, int64_t n, Float16* dst) {
  constexpr int64_t L = V::kLanes;
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const typename V::Reg v = V::Load(src + i);
    V::StoreHalf(out + i, v);
    if (V::AnyNan(v)) {
      for (int64_t l = 0; l < L; ++l) dst[i + l] = F32ToF16(src[i + l]);
    }
  }
  for (; i < n; ++i) dst[i] = F32ToF16(src[i]);
}

void ToF32AnyType(const void* src, DType dtype, int64_t n, float* dst) {
  if (n <= 0) return;  // an empty tensor may have no storage: memcpy must not see its null
  if (dtype == DType::kBF16) return ToF32Simd<DType::kBF16>(src, n, dst);
  if (dtype == DType::kF16) return ToF32Simd<DType::kF16>(src, n, dst);
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace

void ToF32(const void* src, DType dtype, int64_t n, float* dst) {
  ToF32AnyType(src, dtype, n, dst);
}
float Dot(const float* a, const float* b, int64_t n) { return DotSimd(a, b, n); }
float Sum(const float* x, int64_t n) { return SumSimd(x, n); }
void Axpy(float alpha, const float* x, int64_t n, float* y) { AxpySimd(alpha, x, n, y); }
void GemvRows(const float* x, int64_t M, int64_t ldx, const void* w, DType wdtype, int64_t K,
              int64_t j0, int64_t j1, float* y, int64_t ldy) {
  GemvRowsAnyType(x, M, ldx, w, wdtype, K, j0, j1, y, ldy);
}
float ExpShiftSum(float* s, int64_t n, float max) { return ExpShiftSumSimd(s, n, max); }
float Max(const float* x, int64_t n) { return MaxSimd(x, n); }
void SiluMul(const float* g, const float* u, int64_t n, float* y) {
  MapVectors(g, u, n, y, SiluTimes());
}
void GeluTanh(const float* x, int64_t n, float* y) { MapVectors(x, x, n, y, GeluTanhOf()); }
void GeluErf(const float* x, int64_t n, float* y) { MapVectors(x, x, n, y, GeluErfOf()); }
void DequantizeInt4Row(const uint8_t* packed, int64_t first, int64_t n, const float* scale,
                       float* out) {
  DequantizeInt4RowSimd(packed, first, n, scale, out);
}
void ToF16(const float* src, int64_t n, Float16* dst) { ToF16Simd(src, n, dst); }
void QuantizeCodes(const float* x, const float* scale, const float* zero, int64_t stride, int64_t n,
                   int bits, uint8_t* codes) {
  QuantizeCodesSimd(x, scale, zero, stride, n, bits, codes);
}
void WeightedRowsSum(const float* w, int64_t ldw, int64_t heads, const float* u, int64_t rank,
                     const uint16_t* ranks, int64_t n, float* z) {
  WeightedRowsSumSimd(w, ldw, heads, u, rank, ranks, n, z);
}
void TurnLanes(const float* base_cos, const float* base_sin, const float* lane_cos,
               const float* lane_sin, int64_t pairs, float* cos, float* sin) {
  TurnLanesSimd(base_cos, base_sin, lane_cos, lane_sin, pairs, cos, sin);
}
void LowRankScoreLanes(const float* ut, const float* vt, int64_t rank, int64_t kv_heads, int64_t d,
                       int64_t heads, const float* q, float scale, const float* cos,
                       const float* sin, float* scores, int64_t ld, int64_t n) {
  LowRankScoreLanesSimd(ut, vt, rank, kv_heads, d, heads, q, scale, cos, sin, scores, ld, n);
}
