#include <cfloat>

#include "engine/kernels/cuda/attention.cuh"

namespace framezip::engine::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockRows = kWarps * kRowsPerWarp;         // queries per block
constexpr int kTileK = 32;                                // keys per tile: one per lane
constexpr int kPerLane = kAttentionMaxHeadDim / 32;       // output dims a lane accumulates
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Grid (query blocks, heads, batch); 4 warps, each owning 4 query rows. Per key tile: lane j
// scores key j against the row (q·k from shared memory; K rows padded by one float so the 32
// lanes hit 32 banks), the warp reduces max and sum once, then each lane updates its slice of the
// output with P·V.
__global__ void __launch_bounds__(kWarps * 32) AttentionKernel(AttentionParams p) {
  __shared__ float qs[kBlockRows][kAttentionMaxHeadDim];
  __shared__ float ks[kTileK][kAttentionMaxHeadDim + 1];
  __shared__ float vs[kTileK][kAttentionMaxHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d = p.head_dim;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const int h = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int g = h / (p.heads / p.kv_heads);
  const int64_t q_row = static_cast<int64_t>(p.heads) * d;  // elements between tokens
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * d;
  const float* kb = p.k + b * p.tk * kv_row + static_cast<int64_t>(g) * d;
  const float* vb = p.v + b * p.tk * kv_row + static_cast<int64_t>(g) * d;

  // Keys [0, visible(i)) are visible to query i.
  auto visible = [&](int64_t i) -> int64_t {
    int64_t n = p.tk;
    if (p.key_limit != nullptr) {
      n = p.key_limit[i];
    } else if (p.causal) {
      n = i + p.q_offset + 1;
    }
    return n < p.tk ? n : p.tk;
  };

  for (int idx = threadIdx.x; idx < kBlockRows * d; idx += blockDim.x) {
    const int r = idx / d, e = idx % d;
    const int64_t i = i0 + r;
    qs[r][e] = i < p.tq ? p.q[(b * p.tq + i) * q_row + static_cast<int64_t>(h) * d + e] : 0.f;
  }
  int64_t kend = 0;
  for (int r = 0; r < kBlockRows && i0 + r < p.tq; ++r) {
    const int64_t n = visible(i0 + r);
    kend = n > kend ? n : kend;
  }

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -FLT_MAX;  // "nothing seen yet": finite, so exp(m - m_new) needs no inf special case
    l[rr] = 0.f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) acc[rr][t] = 0.f;
  }
  __syncthreads();

  for (int64_t j0 = 0; j0 < kend; j0 += kTileK) {
    const int nk = static_cast<int>(kend - j0 < kTileK ? kend - j0 : kTileK);
    for (int idx = threadIdx.x; idx < kTileK * d; idx += blockDim.x) {
      const int jj = idx / d, e = idx % d;
      const bool in = jj < nk;
      ks[jj][e] = in ? kb[(j0 + jj) * kv_row + e] : 0.f;
      vs[jj][e] = in ? vb[(j0 + jj) * kv_row + e] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t i = i0 + r;
      if (i >= p.tq) continue;  // uniform across the warp
      const int64_t vis = visible(i) - j0;
      if (vis <= 0) continue;   // uniform: this row sees nothing in this tile
      const bool scored = lane < nk && lane < vis;
      float s = -FLT_MAX;
      if (scored) {
        float dot = 0.f;
        for (int e = 0; e < d; ++e) dot = fmaf(qs[r][e], ks[lane][e], dot);
        s = dot * p.scale;
      }
      const float m_new = fmaxf(m[rr], WarpMax(s));
      const float pj = scored ? expf(s - m_new) : 0.f;
      const float corr = expf(m[rr] - m_new);  // 0 on the first visible tile (m = -FLT_MAX)
      l[rr] = l[rr] * corr + WarpSum(pj);
      m[rr] = m_new;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) acc[rr][t] *= corr;
      const int n_used = static_cast<int>(vis < nk ? vis : nk);
      for (int jj = 0; jj < n_used; ++jj) {
        const float pjj = __shfl_sync(kFull, pj, jj);
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) {
          const int e = t * 32 + lane;
          if (e < d) acc[rr][t] = fmaf(pjj, vs[jj][e], acc[rr][t]);
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t i = i0 + warp * kRowsPerWarp + rr;
    if (i >= p.tq) continue;
    const float inv = l[rr] > 0.f ? 1.f / l[rr] : 0.f;  // a row that sees no key outputs 0
    float* o = p.out + (b * p.tq + i) * q_row + static_cast<int64_t>(h) * d;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int e = t * 32 + lane;
      if (e < d) o[e] = acc[rr][t] * inv;
    }
  }
}

}  // namespace

cudaError_t LaunchAttention(const AttentionParams& params, cudaStream_t stream) {
  if (params.head_dim <= 0 || params.head_dim > kAttentionMaxHeadDim || params.kv_heads <= 0 ||
      params.heads % params.kv_heads != 0 || params.heads > 65535 || params.batch > 65535) {
    return cudaErrorInvalidValue;
  }
  if (params.batch == 0 || params.tq == 0 || params.heads == 0) return cudaSuccess;
  const int64_t q_blocks = (params.tq + kBlockRows - 1) / kBlockRows;
  if (q_blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(q_blocks), static_cast<unsigned>(params.heads),
                  static_cast<unsigned>(params.batch));
  AttentionKernel<<<grid, kWarps * 32, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
