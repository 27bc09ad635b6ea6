#include <cfloat>
#include <cmath>
#include <cub/cub.cuh>

#include "engine/kernels/cuda/block_reduce.cuh"
#include "engine/kernels/cuda/float_io.cuh"
#include "engine/kernels/cuda/zipvl.cuh"

namespace framezip::engine::cuda {
namespace {

constexpr int kProbeThreads = 128;
constexpr int kMaxProbeHeadDim = 256;

// One block per (probe row, query head): the row's causal softmax, computed twice (max/sum, then
// the probabilities) and added into the group's column sums. No [H, |P|, n] matrix exists.
__global__ void __launch_bounds__(kProbeThreads) ProbeRowKernel(ProbeScoresLaunch p, float scale) {
  __shared__ float qs[kMaxProbeHeadDim];
  __shared__ float red[kProbeThreads / 32];
  const int i = blockIdx.x, h = blockIdx.y, d = p.head_dim;
  const int g = h / (p.heads / p.kv_heads);
  const int64_t pos = p.probes[i];
  const int64_t visible = pos + 1;
  for (int e = threadIdx.x; e < d; e += blockDim.x) qs[e] = p.q[(pos * p.heads + h) * d + e];
  __syncthreads();
  const float* kb = p.k + static_cast<int64_t>(g) * d;
  const int64_t kstride = static_cast<int64_t>(p.kv_heads) * d;
  auto score = [&](int64_t j) {
    const float* kr = kb + j * kstride;
    float dot = 0.f;
    if ((d & 3) == 0) {
      for (int e = 0; e < d; e += 4) {
        const float4 kv = *reinterpret_cast<const float4*>(kr + e);
        dot = fmaf(qs[e], kv.x, dot);
        dot = fmaf(qs[e + 1], kv.y, dot);
        dot = fmaf(qs[e + 2], kv.z, dot);
        dot = fmaf(qs[e + 3], kv.w, dot);
      }
    } else {
      for (int e = 0; e < d; ++e) dot = fmaf(qs[e], kr[e], dot);
    }
    return scale * dot;
  };
  float m = -INFINITY, sum = 0.f;
  for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) {
    const float s = score(j);
    const float m_new = fmaxf(m, s);
    sum = sum * expf(m - m_new) + expf(s - m_new);
    m = m_new;
  }
  const float row_max = BlockMax<kProbeThreads>(m, red);  // finite: visible >= 1
  const float total = BlockSum<kProbeThreads>(m == -INFINITY ? 0.f : sum * expf(m - row_max), red);
  const float inv = 1.f / total;
  float* a = p.a + (p.per_kv_head ? static_cast<int64_t>(g) * p.n : 0);
  for (int64_t j = threadIdx.x; j < visible; j += blockDim.x) {
    atomicAdd(a + j, expf(score(j) - row_max) * inv);
  }
}

// c_j = probes at or after j (binary search over the sorted probes); ã = a / c.
__global__ void NormalizeKernel(ProbeScoresLaunch p, int groups) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < p.n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int lo = 0, hi = p.num_probes;  // first probe >= j
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (p.probes[mid] < j) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    const int c = p.num_probes - lo;
    p.counts[j] = c;
    for (int g = 0; g < groups; ++g) {
      const int64_t at = g * p.n + j;
      p.a_norm[at] = c > 0 ? p.a[at] / static_cast<float>(c) : 0.f;
    }
  }
}

__global__ void IotaToDoubleKernel(const float* sorted, int64_t n, int32_t* iota, double* wide) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    iota[j] = static_cast<int32_t>(j);
    wide[j] = static_cast<double>(sorted[j]);
  }
}

// p = min{k : Σ_{r<k} sorted(r) >= τ·total} = 1 + #{r : prefix(r) < τ·total} (prefix is
// non-decreasing: scores are >= 0), capped at n, or 0 when τ·total <= 0; τ >= 1: the count of
// positive scores.
__global__ void __launch_bounds__(1024)
    CountKernel(const float* sorted, const double* prefix, int64_t n, double tau, int32_t* count) {
  __shared__ int red[32];
  const double total = prefix[n - 1];
  const double threshold = tau * total;
  int local = 0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    local += tau >= 1.0 ? (sorted[r] > 0.f) : (prefix[r] < threshold);
  }
  for (int o = 16; o > 0; o >>= 1) local += __shfl_xor_sync(0xffffffffu, local, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t c = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) c += red[w];
    // A threshold <= 0 (tau <= 0) is met by the empty prefix: 0, as compress::AdaptiveCount.
    if (tau < 1.0) c = total <= 0 || threshold <= 0 ? 0 : (c + 1 < n ? c + 1 : n);
    *count = static_cast<int32_t>(c);
  }
}

__global__ void FlagKernel(const int32_t* order, int64_t n, const int32_t* count, uint8_t* flags) {
  const int64_t p = *count;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < n;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    flags[order[r]] = r < p ? 1 : 0;
  }
}

// One thread per element, grid-stride; consecutive threads walk a row's columns, so both the
// read and the write of a row are coalesced.
__global__ void CopyRowSlicesKernel(RowSliceCopy p) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       e < p.rows * p.width; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / p.width, c = e % p.width;
    const int64_t from = p.src_rows != nullptr ? p.src_rows[i] : i;
    const int64_t to = p.dst_rows != nullptr ? p.dst_rows[i] : i;
    p.dst[to * p.dst_stride + p.dst_col0 + c] = p.src[from * p.src_stride + p.src_col0 + c];
  }
}

size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

// The workspace's pieces, in order.
struct TopPLayout {
  size_t sorted_a, prefix_in, prefix, iota, sorted_norm, order, flags, selected, cub, cub_bytes,
      total;
};

cudaError_t PlanTopP(int64_t n, TopPLayout& l) {
  const int num = static_cast<int>(n);
  size_t b1 = 0, b2 = 0, b3 = 0, b4 = 0;
  cudaError_t err;
  if ((err = cub::DeviceRadixSort::SortKeysDescending(
           nullptr, b1, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), num)) !=
      cudaSuccess)
    return err;
  if ((err = cub::DeviceScan::InclusiveSum(nullptr, b2, static_cast<const double*>(nullptr),
                                           static_cast<double*>(nullptr), num)) != cudaSuccess)
    return err;
  if ((err = cub::DeviceRadixSort::SortPairsDescending(
           nullptr, b3, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
           static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), num)) !=
      cudaSuccess)
    return err;
  if ((err = cub::DeviceSelect::Flagged(
           nullptr, b4, static_cast<const int32_t*>(nullptr), static_cast<const uint8_t*>(nullptr),
           static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), num)) != cudaSuccess)
    return err;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += Align256(bytes);
    return here;
  };
  const size_t un = static_cast<size_t>(n);
  l.sorted_a = take(un * sizeof(float));
  l.prefix_in = take(un * sizeof(double));
  l.prefix = take(un * sizeof(double));
  l.iota = take(un * sizeof(int32_t));
  l.sorted_norm = take(un * sizeof(float));
  l.order = take(un * sizeof(int32_t));
  l.flags = take(un);
  l.selected = take(sizeof(int32_t));
  l.cub_bytes = std::max(std::max(b1, b2), std::max(b3, b4));
  l.cub = take(l.cub_bytes);
  l.total = at;
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchProbeScores(const ProbeScoresLaunch& p, cudaStream_t stream) {
  if (p.heads <= 0 || p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.head_dim <= 0 ||
      p.head_dim > kMaxProbeHeadDim || p.n < 0 || p.num_probes < 0 || p.heads > 65535) {
    return cudaErrorInvalidValue;
  }
  if (p.n == 0) return cudaSuccess;
  const int groups = p.per_kv_head ? p.kv_heads : 1;
  cudaError_t err = cudaMemsetAsync(p.a, 0, sizeof(float) * groups * p.n, stream);
  if (err != cudaSuccess) return err;
  if (p.num_probes > 0) {
    const float scale = 1.0f / sqrtf(static_cast<float>(p.head_dim));
    ProbeRowKernel<<<dim3(static_cast<unsigned>(p.num_probes), static_cast<unsigned>(p.heads)),
                     kProbeThreads, 0, stream>>>(p, scale);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
  }
  NormalizeKernel<<<GridStrideBlocks(p.n, 256), 256, 0, stream>>>(p, groups);
  return cudaGetLastError();
}

size_t TopPWorkspaceBytes(int64_t n) {
  TopPLayout l;
  if (n <= 0 || PlanTopP(n, l) != cudaSuccess) return 0;
  return l.total;
}

cudaError_t LaunchTopP(const TopPLaunch& p, cudaStream_t stream) {
  if (p.n < 0 || p.n > 0x7fffffff) return cudaErrorInvalidValue;
  if (p.n == 0) return cudaMemsetAsync(p.count, 0, sizeof(int32_t), stream);
  TopPLayout l;
  cudaError_t err = PlanTopP(p.n, l);
  if (err != cudaSuccess) return err;
  char* ws = static_cast<char*>(p.workspace);
  auto* sorted_a = reinterpret_cast<float*>(ws + l.sorted_a);
  auto* prefix_in = reinterpret_cast<double*>(ws + l.prefix_in);
  auto* prefix = reinterpret_cast<double*>(ws + l.prefix);
  auto* iota = reinterpret_cast<int32_t*>(ws + l.iota);
  auto* sorted_norm = reinterpret_cast<float*>(ws + l.sorted_norm);
  auto* order = reinterpret_cast<int32_t*>(ws + l.order);
  auto* flags = reinterpret_cast<uint8_t*>(ws + l.flags);
  auto* selected = reinterpret_cast<int32_t*>(ws + l.selected);
  void* cub_tmp = ws + l.cub;
  const int num = static_cast<int>(p.n);
  size_t bytes = l.cub_bytes;
  if ((err = cub::DeviceRadixSort::SortKeysDescending(cub_tmp, bytes, p.a, sorted_a, num, 0,
                                                      sizeof(float) * 8, stream)) != cudaSuccess)
    return err;
  IotaToDoubleKernel<<<GridStrideBlocks(p.n, 256), 256, 0, stream>>>(sorted_a, p.n, iota,
                                                                     prefix_in);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  bytes = l.cub_bytes;
  if ((err = cub::DeviceScan::InclusiveSum(cub_tmp, bytes, prefix_in, prefix, num, stream)) !=
      cudaSuccess)
    return err;
  CountKernel<<<1, 1024, 0, stream>>>(sorted_a, prefix, p.n, p.tau, p.count);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  bytes = l.cub_bytes;
  // Stable radix sort: equal scores keep ascending indices (the CPU's tie rule).
  if ((err = cub::DeviceRadixSort::SortPairsDescending(cub_tmp, bytes, p.a_norm, sorted_norm, iota,
                                                       order, num, 0, sizeof(float) * 8, stream)) !=
      cudaSuccess)
    return err;
  FlagKernel<<<GridStrideBlocks(p.n, 256), 256, 0, stream>>>(order, p.n, p.count, flags);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  bytes = l.cub_bytes;
  return cub::DeviceSelect::Flagged(cub_tmp, bytes, iota, flags, p.indices, selected, num, stream);
}

cudaError_t LaunchCopyRowSlices(const RowSliceCopy& params, cudaStream_t stream) {
  if (params.rows <= 0 || params.width <= 0) return cudaSuccess;
  CopyRowSlicesKernel<<<GridStrideBlocks(params.rows * params.width, 256), 256, 0, stream>>>(
      params);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const float* src, int64_t width, const int32_t* idx, int64_t m,
                             float* dst, cudaStream_t stream) {
  return LaunchCopyRowSlices({.src = src,
                              .src_stride = width,
                              .src_rows = idx,
                              .dst = dst,
                              .dst_stride = width,
                              .rows = m,
                              .width = width},
                             stream);
}

cudaError_t LaunchScatterRows(const float* src, int64_t width, const int32_t* idx, int64_t m,
                              float* dst, cudaStream_t stream) {
  return LaunchCopyRowSlices({.src = src,
                              .src_stride = width,
                              .dst = dst,
                              .dst_stride = width,
                              .dst_rows = idx,
                              .rows = m,
                              .width = width},
                             stream);
}

}  // namespace framezip::engine::cuda
