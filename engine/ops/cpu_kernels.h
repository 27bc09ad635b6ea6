// Vectorised inner loops shared by the CPU ops (internal to the engine — engine/kv uses ToF32 —
// not an op API).
//
// Each function picks an implementation once per process: AVX-512F when the CPU has it, else
// AVX2+FMA+F16C, else a portable scalar loop (FRAMEZIP_CPU_KERNELS=avx2|scalar lowers the choice;
// another value is reported on stderr and ignored).
// The SIMD paths are one source compiled per ISA in target regions (cpu_kernels_simd.inl), so the
// library is still built for baseline x86-64 and -march=native is never needed. Results of the
// paths differ only by f32 summation order.
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/core/half.h"

namespace framezip::engine::ops::cpu {

// Sets OpenBLAS to one thread, once per process: ops call sgemm from inside ComputePool() tasks,
// so the pool is the only source of parallelism.
void EnsureBlasSingleThreaded();

// True when the AVX2/FMA/F16C paths are in use (FRAMEZIP_NO_SIMD=1 forces the portable ones).
// Also true where these loops run AVX-512: the kernels with only an AVX2 path use it there.
bool UseAvx2();

// True when these loops run AVX-512F (the CPU and OS have it, FRAMEZIP_CPU_KERNELS does not lower
// it): the kernels built per ISA outside this file (paged decode attention) follow the same choice.
bool UseAvx512();

// dst[i] = float(src[i]), i in [0, n); src of dtype f32, bf16 or f16.
void ToF32(const void* src, DType dtype, int64_t n, float* dst);

// dst[i] = F32ToF16(src[i]), i in [0, n): the same bits as the scalar conversion on every path
// (KV pages in f16 are written through it).
void ToF16(const float* src, int64_t n, Float16* dst);

// Σ a[i]·b[i] in f32.
float Dot(const float* a, const float* b, int64_t n);

// Σ x[i] in f32 (LayerNorm's mean: a plain loop does not vectorise a float sum).
float Sum(const float* x, int64_t n);

// y[i] += alpha · x[i]
void Axpy(float alpha, const float* x, int64_t n, float* y);

// y[i] *= alpha
void Scale(float alpha, int64_t n, float* y);

// For every row m in [0, M) and weight row j in [j0, j1):
//   y[m·ldy + j] = Σ_k x[m·ldx + k] · float(w[j·K + k])
// w is [N, K] in `wdtype` (f32, bf16 or f16). Reads each weight row once for all M rows of x:
// the bandwidth-bound GEMV of decode steps.
void GemvRows(const float* x, int64_t M, int64_t ldx, const void* w, DType wdtype, int64_t K,
              int64_t j0, int64_t j1, float* y, int64_t ldy);

// y[i] = g[i] · sigmoid(g[i]) · u[i] (Qwen2's SwiGLU MLP).
void SiluMul(const float* g, const float* u, int64_t n, float* y);

// y[i] = x[i]/2 · (1 + tanh(√(2/π)(x[i] + 0.044715·x[i]³))) (SigLIP's gelu_pytorch_tanh),
// computed as x · sigmoid(2u).
void GeluTanh(const float* x, int64_t n, float* y);

// y[i] = x[i]/2 · (1 + erf(x[i]/√2)) (nn.GELU(): the projector, Dynamic-LLaVA's predictors). The
// SIMD paths take erf from Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7, the approximation
// PyTorch's vectorised CPU erf uses), the portable path std::erf.
void GeluErf(const float* x, int64_t n, float* y);

// out[c] = (code(first + c) - 8) · scale[c], c in [0, n): symmetric int4 codes packed two per
// byte, element i in byte i/2, low nibble first (AttentionPack's int4 factors,
// kv/low_rank_factor.h). Every path gives the same bits.
void DequantizeInt4Row(const uint8_t* packed, int64_t first, int64_t n, const float* scale,
                       float* out);

// codes[i] = kvq::QuantizeOne(x[i], scale[i·stride], zero[i·stride], bits) for i in [0, n), with
// stride 1 (a scale and zero per element: KIVI keys, per channel) or 0 (one for all: KIVI values,
// per group). The division, clamp and rounding are the same f32 operations on every path, so
// every path gives the same codes.
void QuantizeCodes(const float* x, const float* scale, const float* zero, int64_t stride, int64_t n,
                   int bits, uint8_t* codes);

// z[h·rank + j] += Σ_i w[h·ldw + i] · u[i·rank + j] over i in [0, n) and j < ranks[i] (each
// ranks[i] in [0, rank]): AttentionPack's value side, the attention-weighted sum of a block's U·S
// rows, each read at its token's rank. z [heads, rank] is accumulated into.
void WeightedRowsSum(const float* w, int64_t ldw, int64_t heads, const float* u, int64_t rank,
                     const uint16_t* ranks, int64_t n, float* z);
// AttentionPack's key scores for n <= kLowRankLanes tokens of a low-rank block, one token per
// lane (ops/low_rank.h): key_l = Σ_j ut[j·W + l] · vt[j·hd + :] over all G = kv_heads heads
// (hd = G·d, W = kLowRankLanes), each head rotated by half-split RoPE with cos/sin[c·W + l],
// c < d/2, then scores[h·ld + l] = scale · q[h] · key_l[slice of h's group], for l < n. Lanes
// past n are computed from what ut/cos/sin hold there (keep them finite) and not stored. The SIMD
// paths run the same operations per lane in the same order, so AVX2 and AVX-512 give the same
// bits; they need heads / kv_heads <= kLowRankMaxGroup, else the portable loop runs.
inline constexpr int64_t kLowRankLanes = 16;
inline constexpr int64_t kLowRankMaxGroup = 8;
// cos[c·W + l] = bc·lane_cos[c·W + l] − bs·lane_sin[c·W + l] and
// sin[c·W + l] = bs·lane_cos[c·W + l] + bc·lane_sin[c·W + l] with bc/bs = base_cos/base_sin[c],
// for c < pairs and the W = kLowRankLanes lanes (angle addition: a tile's RoPE angles as its base
// angle plus each lane's offset; f32 products in this order, the same bits on every path).
void TurnLanes(const float* base_cos, const float* base_sin, const float* lane_cos,
               const float* lane_sin, int64_t pairs, float* cos, float* sin);
void LowRankScoreLanes(const float* ut, const float* vt, int64_t rank, int64_t kv_heads, int64_t d,
                       int64_t heads, const float* q, float scale, const float* cos,
                       const float* sin, float* scores, int64_t ld, int64_t n);
// max_i x[i] over n >= 0 entries (-inf for none), for softmax rows: std::max_element does not
// vectorise, and in prefill attention at head size 32 it was a quarter of the time.
float Max(const float* x, int64_t n);

// s[i] = exp(s[i] - max) for i in [0, n) (entries that are -inf become 0); returns Σ s[i].
float ExpShiftSum(float* s, int64_t n, float max);

}  // namespace framezip::engine::ops::cpu
