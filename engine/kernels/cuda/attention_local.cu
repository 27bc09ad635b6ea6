#include <cfloat>

#include "engine/kernels/cuda/attention_local.cuh"

namespace framezip::engine::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kPerLane = kLocalWindowMaxHeadDim / 32;  // head-dim elements a lane holds
constexpr unsigned kFull = 0xffffffffu;

// Butterfly all-reduce: every lane ends with the same bits (each step adds the same two values
// in either order, and float addition commutes), so the softmax state stays warp-uniform.
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Row j of the layer's key sequence for one KV head: earlier chunks' keys first, then this chunk's.
__device__ __forceinline__ const float* SequenceRow(const float* past_rows, const float* chunk_rows,
                                                    int64_t past, int64_t j, int64_t row_stride,
                                                    int64_t head_offset) {
  return j < past ? past_rows + j * row_stride + head_offset
                  : chunk_rows + (j - past) * row_stride + head_offset;
}

// The running (max, sum, P·V) of an online softmax over one (row, head)'s keys; lane `lane` owns
// the head-dim elements lane, lane + 32, ... .
struct OnlineSoftmax {
  float m = -FLT_MAX;  // finite "nothing seen yet": exp(m - m_new) is 0, never NaN
  float l = 0.f;
  float acc[kPerLane] = {};

  __device__ __forceinline__ void Add(const float (&q)[kPerLane], const float* key,
                                      const float* value, int d, int lane, float scale) {
    float partial = 0.f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int e = t * 32 + lane;
      if (e < d) partial = fmaf(q[t], key[e], partial);
    }
    const float s = WarpSum(partial) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);
    const float w = expf(s - m_new);
    l = l * corr + w;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int e = t * 32 + lane;
      if (e < d) acc[t] = fmaf(w, value[e], acc[t] * corr);
    }
    m = m_new;
  }
};

// One warp per (selected row, query head). Why not the blocked kernel of attention.cu: a row sees
// at most sinks + window keys (dozens) and the rows are a sparse subset, so there is no tile of
// keys shared by many queries to stage in shared memory; a warp per (row, head) keeps the whole
// softmax in registers with no block synchronisation. Lanes split the head dim, so each key and
// value row is read with coalesced 128-byte loads and a dot product costs one warp all-reduce.
// The warps of a block take consecutive heads of one row, so the query heads of a GQA group read
// the same K/V rows close together in time (L1/L2 hits).
__global__ void __launch_bounds__(kWarpsPerBlock * 32) LocalWindowKernel(LocalWindowLaunch p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (item >= p.num_rows * p.nh) return;  // the whole warp: no shuffle is left half-empty
  const int64_t i = p.rows[item / p.nh];
  const int h = p.h0 + static_cast<int>(item % p.nh);
  const int kv_head = h / (p.heads / p.kv_heads);
  const int d = p.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * d;  // elements between tokens
  const int64_t kv_offset = static_cast<int64_t>(kv_head) * d;

  const float* q_row = p.q + (i * p.heads + h) * d;
  float q[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int e = t * 32 + lane;
    q[t] = e < d ? q_row[e] : 0.f;
  }

  // The CPU op's key list: sinks [0, min(sinks, lo)), then the window [lo, pos]; a sink inside
  // the window is attended once, as part of the window.
  const int64_t pos = p.past + i;
  const int64_t lo = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
  const int64_t sink_end = p.sinks < lo ? p.sinks : lo;
  OnlineSoftmax state;
  auto attend = [&](int64_t j) {
    state.Add(q, SequenceRow(p.past_k, p.k, p.past, j, kv_stride, kv_offset),
              SequenceRow(p.past_v, p.v, p.past, j, kv_stride, kv_offset), d, lane, p.scale);
  };
  for (int64_t j = 0; j < sink_end; ++j) attend(j);
  for (int64_t j = lo; j <= pos; ++j) attend(j);

  const float inv = 1.f / state.l;  // l >= 1: the largest score contributes exp(0)
  float* o = p.out + (i * p.heads + h) * d;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int e = t * 32 + lane;
    if (e < d) o[e] = state.acc[t] * inv;
  }
}

}  // namespace

cudaError_t LaunchLocalWindowAttention(const LocalWindowLaunch& params, cudaStream_t stream) {
  const LocalWindowLaunch& p = params;
  if (p.head_dim <= 0 || p.head_dim > kLocalWindowMaxHeadDim || p.kv_heads <= 0 ||
      p.heads % p.kv_heads != 0 || p.h0 < 0 || p.nh < 0 || p.h0 + p.nh > p.heads || p.window < 1 ||
      p.sinks < 0 || p.past < 0 || p.num_rows < 0 ||
      (p.past > 0 && (p.past_k == nullptr || p.past_v == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (p.num_rows == 0 || p.nh == 0) return cudaSuccess;
  const int64_t blocks = (p.num_rows * p.nh + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  LocalWindowKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
