#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "engine/kernels/cuda/block_reduce.cuh"
#include "engine/kernels/cuda/low_rank.cuh"

namespace framezip::engine::cuda {
namespace {

constexpr int kThreads = kLowRankChunk;  // pass 1: one thread per token of the chunk
constexpr int kMergeThreads = 128;       // pass 2: one block per head

// Element (r, c) of a factor as f32: the same value ops::FactorView::DecodeRows gives.
__device__ __forceinline__ float FactorAt(const DeviceFactor& f, int64_t r, int64_t c) {
  const int64_t i = r * f.cols + c;
  switch (f.format) {
    case DeviceFactor::kF32:
      return __ldg(f.f32 + i);
    case DeviceFactor::kF16:
      return __half2float(__ushort_as_half(__ldg(f.f16 + i)));
    default: {
      const uint8_t byte = __ldg(f.packed + i / 2);
      const int code = (i % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
      const float scale =
          __half2float(__ushort_as_half(__ldg(f.scales + (r / f.group_rows) * f.cols + c)));
      return static_cast<float>(code - 8) * scale;
    }
  }
}

// Pass 1: a chunk's scores, weights, and per-head maximum, sum and z (see the header).
// Shared memory: q [H·d] | s [H, kThreads] | uk [R_k, kThreads] | uv [R_v, kThreads] (token
// lanes innermost, so each thread's rows sit in its own bank).
__global__ void __launch_bounds__(kThreads) ChunkKernel(LowRankAttendLaunch p, int64_t chunks) {
  extern __shared__ float smem[];
  const int heads = p.heads, d = p.head_dim, half = d / 2;
  const int group = heads / p.kv_heads;
  const int64_t rank_k = p.key_us.cols, rank_v = p.value_us.cols;
  float* q = smem;
  float* s = q + heads * d;
  float* uk = s + heads * kThreads;
  float* uv = uk + rank_k * kThreads;
  __shared__ float reduce_scratch[kThreads / 32];

  const int64_t chunk = blockIdx.x;
  const int lane = threadIdx.x;
  const int64_t t = chunk * kThreads + lane;
  const bool valid = t < p.tokens;

  for (int i = lane; i < heads * d; i += kThreads) q[i] = p.q[i];
  int value_rank = 0;
  for (int64_t j = 0; j < rank_k; ++j)
    uk[j * kThreads + lane] = valid ? FactorAt(p.key_us, t, j) : 0.f;
  if (valid) {
    value_rank = min(static_cast<int>(p.value_ranks[t]), static_cast<int>(rank_v));
  }
  for (int64_t j = 0; j < rank_v; ++j) {
    uv[j * kThreads + lane] = j < value_rank ? FactorAt(p.value_us, t, j) : 0.f;
  }
  for (int h = 0; h < heads; ++h) s[h * kThreads + lane] = 0.f;
  __syncthreads();

  // Keys: per rotation pair c of every KV head, rebuild the pair, rotate it, fold it into the
  // scores of the query heads that read that KV head.
  const float position = valid ? static_cast<float>(p.positions[t]) : 0.f;
  for (int c = 0; c < half; ++c) {
    float sn, cs;
    // The f32 angle float(pos)·θ_c of ApplyRope; its sine and cosine in full precision.
    sincosf(position * __ldg(p.inv_freq + c), &sn, &cs);
    for (int g = 0; g < p.kv_heads; ++g) {
      float k1 = 0.f, k2 = 0.f;
      for (int64_t j = 0; j < rank_k; ++j) {
        const float u = uk[j * kThreads + lane];
        k1 = fmaf(u, FactorAt(p.key_vt, j, g * d + c), k1);
        k2 = fmaf(u, FactorAt(p.key_vt, j, g * d + c + half), k2);
      }
      const float r1 = k1 * cs - k2 * sn;
      const float r2 = k2 * cs + k1 * sn;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        float& acc = s[h * kThreads + lane];
        acc = fmaf(q[h * d + c], r1, fmaf(q[h * d + c + half], r2, acc));
      }
    }
  }

  // Per head: scale, the chunk's maximum, e^(s − max) into weights and s, their sum.
  float* chunk_max = p.scratch;
  float* chunk_sum = chunk_max + chunks * heads;
  float* chunk_z = chunk_sum + chunks * heads;
  for (int h = 0; h < heads; ++h) {
    const float score = valid ? s[h * kThreads + lane] * p.scale : -INFINITY;
    const float mx = BlockMax<kThreads>(score, reduce_scratch);
    const float e = valid ? expf(score - mx) : 0.f;
    s[h * kThreads + lane] = e;
    if (valid) p.weights[static_cast<int64_t>(h) * p.tokens + t] = e;
    const float total = BlockSum<kThreads>(e, reduce_scratch);
    if (lane == 0) {
      chunk_max[chunk * heads + h] = mx;
      chunk_sum[chunk * heads + h] = total;
    }
  }
  __syncthreads();

  // z[h, j] = Σ_t e[h, t]·uv[j, t] (uv is zero past each token's rank).
  for (int64_t o = lane; o < heads * rank_v; o += kThreads) {
    const int64_t h = o / rank_v, j = o % rank_v;
    const float* e = s + h * kThreads;
    const float* u = uv + j * kThreads;
    float acc = 0.f;
    for (int i = 0; i < kThreads; ++i) acc = fmaf(e[i], u[i], acc);
    chunk_z[(chunk * heads + h) * rank_v + j] = acc;
  }
}

// Pass 2, one block per head: merge the chunks by their maxima and apply Vᵀ once.
// Shared memory: z [R_v].
__global__ void __launch_bounds__(kMergeThreads)
    MergeKernel(LowRankAttendLaunch p, int64_t chunks) {
  extern __shared__ float z[];
  __shared__ float reduce_scratch[kMergeThreads / 32];
  const int h = blockIdx.x, heads = p.heads, d = p.head_dim;
  const int64_t rank_v = p.value_us.cols;
  const float* chunk_max = p.scratch;
  const float* chunk_sum = chunk_max + chunks * heads;
  const float* chunk_z = chunk_sum + chunks * heads;

  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < chunks; c += kMergeThreads) {
    mx = fmaxf(mx, chunk_max[c * heads + h]);
  }
  mx = BlockMax<kMergeThreads>(mx, reduce_scratch);
  float total = 0.f;
  for (int64_t c = threadIdx.x; c < chunks; c += kMergeThreads) {
    total += expf(chunk_max[c * heads + h] - mx) * chunk_sum[c * heads + h];
  }
  total = BlockSum<kMergeThreads>(total, reduce_scratch);
  for (int64_t j = threadIdx.x; j < rank_v; j += kMergeThreads) {
    float acc = 0.f;
    for (int64_t c = 0; c < chunks; ++c) {
      acc = fmaf(expf(chunk_max[c * heads + h] - mx), chunk_z[(c * heads + h) * rank_v + j], acc);
    }
    z[j] = acc;
  }
  __syncthreads();
  const int64_t column0 = static_cast<int64_t>(h / (heads / p.kv_heads)) * d;
  for (int i = threadIdx.x; i < d; i += kMergeThreads) {
    float acc = 0.f;
    for (int64_t j = 0; j < rank_v; ++j)
      acc = fmaf(z[j], FactorAt(p.value_vt, j, column0 + i), acc);
    p.out[static_cast<int64_t>(h) * d + i] = acc;
  }
  if (threadIdx.x == 0) {
    p.max[h] = mx;
    p.sum[h] = total;
  }
}

// Pass 2b: every chunk's weights follow to the block's maximum of their head.
__global__ void RescaleWeightsKernel(LowRankAttendLaunch p, int64_t chunks) {
  const int64_t n = static_cast<int64_t>(p.heads) * p.tokens;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = i / p.tokens, t = i % p.tokens, c = t / kThreads;
    const float f = expf(p.scratch[c * p.heads + h] - p.max[h]);
    if (f != 1.f) p.weights[i] *= f;
  }
}

bool FactorShapeIs(const DeviceFactor& f, int64_t rows, int64_t cols) {
  if (f.rows != rows || f.cols != cols) return false;
  switch (f.format) {
    case DeviceFactor::kF32:
      return f.f32 != nullptr;
    case DeviceFactor::kF16:
      return f.f16 != nullptr;
    case DeviceFactor::kInt4:
      return f.packed != nullptr && f.scales != nullptr && f.group_rows > 0;
    default:
      return false;
  }
}

// int4 scales: one thread per (group, column).
__global__ void Int4ScalesKernel(EncodeFactorLaunch p) {
  const int64_t groups = (p.rows + p.group_rows - 1) / p.group_rows;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < groups * p.cols;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = i / p.cols, c = i % p.cols;
    const int64_t r1 = min(p.rows, (g + 1) * p.group_rows);
    float max_abs = 0.f;
    for (int64_t r = g * p.group_rows; r < r1; ++r) {
      max_abs = fmaxf(max_abs, fabsf(p.values[r * p.cols + c]));
    }
    p.scales[i] = __half_as_ushort(__float2half_rn(max_abs / 7.f));
  }
}

// int4 codes: one thread per byte (two elements, which may sit in different columns or rows).
__global__ void Int4CodesKernel(EncodeFactorLaunch p) {
  const int64_t n = p.rows * p.cols, bytes = (n + 1) / 2;
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < bytes;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint8_t byte = 0;
    for (int k = 0; k < 2; ++k) {
      const int64_t i = 2 * b + k;
      if (i >= n) break;
      const int64_t r = i / p.cols, c = i % p.cols;
      const float scale = __half2float(__ushort_as_half(p.scales[(r / p.group_rows) * p.cols + c]));
      const float inv = scale > 0.f ? 1.f / scale : 0.f;
      const float q = fminf(fmaxf(rintf(p.values[i] * inv), -7.f), 7.f);
      byte |= static_cast<uint8_t>((static_cast<int>(q) + 8) << (4 * k));
    }
    p.packed[b] = byte;
  }
}

__global__ void F16Kernel(EncodeFactorLaunch p) {
  const int64_t n = p.rows * p.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p.f16[i] = __half_as_ushort(__float2half_rn(p.values[i]));
  }
}

__global__ void CountNonFiniteKernel(const float* x, int64_t n, int* count) {
  int local = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    local += isfinite(x[i]) ? 0 : 1;
  }
  if (local != 0) atomicAdd(count, local);
}

int GridFor(int64_t n, int threads) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 4096)));
}

// The merged maximum M and sum S of one head over the base share (lse, sum 1) and the parts; a
// share of no weight (sum 0, or lse −inf) takes no part in M.
__device__ void MergedTotals(const AttentionMergeLaunch& p, int h, float& m, float& s) {
  const float lse = p.base_lse[h];
  m = lse;
  for (int i = 0; i < p.parts; ++i) {
    const size_t at = static_cast<size_t>(i) * p.heads + h;
    if (p.part_sum[at] > 0.f) m = fmaxf(m, p.part_max[at]);
  }
  s = 0.f;
  if (m == -INFINITY) return;
  if (lse != -INFINITY) s = expf(lse - m);
  for (int i = 0; i < p.parts; ++i) {
    const size_t at = static_cast<size_t>(i) * p.heads + h;
    if (p.part_sum[at] > 0.f) s = fmaf(expf(p.part_max[at] - m), p.part_sum[at], s);
  }
}

__global__ void AttentionMergeKernel(AttentionMergeLaunch p) {
  const int h = blockIdx.x;
  float m, s;
  MergedTotals(p, h, m, s);
  const float inv = s > 0.f ? 1.f / s : 0.f;
  const float base_weight =
      (m == -INFINITY || p.base_lse[h] == -INFINITY) ? 0.f : expf(p.base_lse[h] - m);
  for (int c = threadIdx.x; c < p.head_dim; c += blockDim.x) {
    const size_t at = static_cast<size_t>(h) * p.head_dim + c;
    float acc = base_weight * p.base[at];
    for (int i = 0; i < p.parts; ++i) {
      const size_t ph = static_cast<size_t>(i) * p.heads + h;
      if (p.part_sum[ph] > 0.f) {
        acc = fmaf(expf(p.part_max[ph] - m),
                   p.part_out[static_cast<size_t>(i) * p.heads * p.head_dim + at], acc);
      }
    }
    p.out[at] = acc * inv;
  }
  if (threadIdx.x == 0) {
    p.total_max[h] = m;
    p.total_sum[h] = s;
  }
}

__global__ void TokenSharesKernel(TokenSharesLaunch p) {
  const float inv_heads = 1.f / static_cast<float>(p.heads);
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < p.tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int h = 0; h < p.heads; ++h) {
      const float s = p.total_sum[h];
      if (!(s > 0.f)) continue;
      const float f = expf(p.part_max[h] - p.total_max[h]) / s * inv_heads;
      acc = fmaf(f, p.weights[static_cast<size_t>(h) * p.tokens + t], acc);
    }
    p.probs[t] = acc;
  }
}

}  // namespace

cudaError_t LaunchAttentionMerge(const AttentionMergeLaunch& p, cudaStream_t stream) {
  if (p.base == nullptr || p.base_lse == nullptr || p.out == nullptr || p.total_max == nullptr ||
      p.total_sum == nullptr || p.parts < 0 || p.heads < 1 || p.head_dim < 1 ||
      (p.parts > 0 && (p.part_max == nullptr || p.part_sum == nullptr || p.part_out == nullptr))) {
    return cudaErrorInvalidValue;
  }
  AttentionMergeKernel<<<p.heads, 128, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchTokenShares(const TokenSharesLaunch& p, cudaStream_t stream) {
  if (p.weights == nullptr || p.part_max == nullptr || p.total_max == nullptr ||
      p.total_sum == nullptr || p.probs == nullptr || p.heads < 1 || p.tokens < 0) {
    return cudaErrorInvalidValue;
  }
  if (p.tokens == 0) return cudaSuccess;
  TokenSharesKernel<<<GridFor(p.tokens, 256), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchCountNonFinite(const float* x, int64_t n, int* count, cudaStream_t stream) {
  if (x == nullptr || count == nullptr || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  CountNonFiniteKernel<<<GridFor(n, 256), 256, 0, stream>>>(x, n, count);
  return cudaGetLastError();
}

cudaError_t LaunchEncodeFactor(const EncodeFactorLaunch& p, cudaStream_t stream) {
  if (p.values == nullptr || p.rows < 1 || p.cols < 1) return cudaErrorInvalidValue;
  constexpr int kPackThreads = 256;
  if (p.format == DeviceFactor::kF16) {
    if (p.f16 == nullptr) return cudaErrorInvalidValue;
    F16Kernel<<<GridFor(p.rows * p.cols, kPackThreads), kPackThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }
  if (p.format != DeviceFactor::kInt4 || p.packed == nullptr || p.scales == nullptr ||
      p.group_rows < 1) {
    return cudaErrorInvalidValue;
  }
  const int64_t groups = (p.rows + p.group_rows - 1) / p.group_rows;
  Int4ScalesKernel<<<GridFor(groups * p.cols, kPackThreads), kPackThreads, 0, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  Int4CodesKernel<<<GridFor((p.rows * p.cols + 1) / 2, kPackThreads), kPackThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchLowRankAttend(const LowRankAttendLaunch& p, cudaStream_t stream) {
  const int64_t rank_k = p.key_us.cols, rank_v = p.value_us.cols;
  const int64_t hd = static_cast<int64_t>(p.kv_heads) * p.head_dim;
  if (p.tokens < 1 || p.heads < 1 || p.kv_heads < 1 || p.heads % p.kv_heads != 0 ||
      p.head_dim < 2 || p.head_dim % 2 != 0 || rank_k < 1 || rank_v < 1 || p.q == nullptr ||
      p.positions == nullptr || p.value_ranks == nullptr || p.inv_freq == nullptr ||
      p.weights == nullptr || p.max == nullptr || p.sum == nullptr || p.out == nullptr ||
      p.scratch == nullptr || !FactorShapeIs(p.key_us, p.tokens, rank_k) ||
      !FactorShapeIs(p.key_vt, rank_k, hd) || !FactorShapeIs(p.value_us, p.tokens, rank_v) ||
      !FactorShapeIs(p.value_vt, rank_v, hd)) {
    return cudaErrorInvalidValue;
  }
  const size_t shared = LowRankAttendSharedBytes(p.heads, p.head_dim, rank_k, rank_v);
  int device = 0, optin = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err != cudaSuccess) return err;
  // The kernel's static reduction scratch shares the block's budget.
  if (shared + sizeof(float) * (kThreads / 32) > static_cast<size_t>(optin)) {
    return cudaErrorInvalidValue;
  }
  if (shared > 48 * 1024) {
    err = cudaFuncSetAttribute(ChunkKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(shared));
    if (err != cudaSuccess) return err;
  }
  const int64_t chunks = (p.tokens + kThreads - 1) / kThreads;
  ChunkKernel<<<static_cast<unsigned>(chunks), kThreads, shared, stream>>>(p, chunks);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  MergeKernel<<<static_cast<unsigned>(p.heads), kMergeThreads, sizeof(float) * rank_v, stream>>>(
      p, chunks);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t n = static_cast<int64_t>(p.heads) * p.tokens;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  RescaleWeightsKernel<<<blocks, 256, 0, stream>>>(p, chunks);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
