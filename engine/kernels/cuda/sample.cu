// One block of kThreads per row. The row stays in global memory (it is read a few dozen times,
// from L2 after the first pass: 600 KB for a 151936-token vocabulary); every reduction is a
// block reduction through shared memory. See ops/sample.h for the semantics.
#include <cfloat>
#include <cstdint>

#include "engine/kernels/cuda/block_reduce.cuh"
#include "engine/kernels/cuda/sample.cuh"

namespace framezip::engine::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// Monotone map of a float's bits to uint32 (a < b  <=>  Key(a) < Key(b)), −inf included. −0
// maps to +0's key: the CPU compares floats, where −0 == +0, so a cut at 0 keeps both.
__device__ __forceinline__ uint32_t Key(float x) {
  const uint32_t b = __float_as_uint(x == 0.f ? 0.f : x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Argmax, the lowest index on ties (std::max_element).
__device__ int64_t BlockArgmax(const float* s, int64_t n, float* vals, int64_t* idxs) {
  float best = -INFINITY;
  int64_t bi = -1;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float x = s[i];
    if (bi < 0 || x > best) {
      best = x;
      bi = i;
    }
  }
  vals[threadIdx.x] = best;
  idxs[threadIdx.x] = bi;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float ov = vals[threadIdx.x + stride];
      const int64_t oi = idxs[threadIdx.x + stride];
      const int64_t mi = idxs[threadIdx.x];
      if (oi >= 0 && (mi < 0 || ov > vals[threadIdx.x] || (ov == vals[threadIdx.x] && oi < mi))) {
        vals[threadIdx.x] = ov;
        idxs[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const int64_t r = idxs[0];
  __syncthreads();
  return r;
}

// Number of logits whose key is >= t.
__device__ int64_t CountAtLeast(const float* s, int64_t n, uint32_t t, int64_t* scratch) {
  int64_t c = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) c += Key(s[i]) >= t ? 1 : 0;
  return BlockSum<kThreads, int64_t>(c, scratch);
}

// Σ exp(s − max) over the logits whose key is <= t (−inf contributes 0).
__device__ double MassAtMost(const float* s, int64_t n, float max, uint32_t t, double* scratch) {
  double m = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float x = s[i];
    if (Key(x) <= t) m += exp(static_cast<double>(x) - max);
  }
  return BlockSum<kThreads, double>(m, scratch);
}

__global__ void __launch_bounds__(kThreads) SampleKernel(SampleParams p) {
  __shared__ float fvals[kThreads];
  __shared__ int64_t ivals[kThreads];
  __shared__ double dscratch[kWarps];
  __shared__ int64_t iscratch[kWarps];
  __shared__ float fscratch[kWarps];
  __shared__ double warp_totals[kWarps];
  __shared__ int64_t found;

  const SampleRowParams rp = p.row_params[blockIdx.x];
  const int64_t n = p.vocab;
  float* s = p.logits + blockIdx.x * n;

  // 1. Repetition penalty, once per distinct id.
  if (rp.repetition_penalty != 1.f) {
    for (int i = rp.penalized_begin + threadIdx.x; i < rp.penalized_end; i += kThreads) {
      const int32_t t = p.penalized[i];
      if (t < 0 || t >= n) continue;
      const float x = s[t];
      s[t] = x < 0 ? x * rp.repetition_penalty : x / rp.repetition_penalty;
    }
    __syncthreads();
  }
  // 2. Greedy.
  if (rp.greedy) {
    const int64_t best = BlockArgmax(s, n, fvals, ivals);
    if (threadIdx.x == 0) p.tokens[blockIdx.x] = static_cast<int32_t>(best);
    return;
  }
  // 3. Temperature.
  if (rp.temperature != 1.f) {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) s[i] /= rp.temperature;
    __syncthreads();
  }
  // 4. Top-k: the k-th largest key is the largest t with count(key >= t) >= k.
  if (rp.top_k > 0 && rp.top_k < n) {
    // In 64 bits: hi - lo + 1 overflows 32 when the range is all of them.
    uint64_t lo = 0, hi = 0xffffffffu;
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo + 1) / 2;
      if (CountAtLeast(s, n, static_cast<uint32_t>(mid), iscratch) >= rp.top_k) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const uint32_t kth = static_cast<uint32_t>(lo);
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      if (Key(s[i]) < kth) s[i] = -INFINITY;
    }
    __syncthreads();
  }
  float local_max = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) local_max = fmaxf(local_max, s[i]);
  const float max = BlockMax<kThreads>(local_max, fscratch);
  // 5. Top-p: keep keys >= the smallest t with mass(key <= t) > (1 − top_p) · total.
  if (rp.top_p < 1.f) {
    const double total = MassAtMost(s, n, max, 0xffffffffu, dscratch);
    const double drop = (1.0 - static_cast<double>(rp.top_p)) * total;
    uint32_t lo = 0, hi = Key(max);
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      if (MassAtMost(s, n, max, mid, dscratch) > drop) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      if (Key(s[i]) < lo) s[i] = -INFINITY;
    }
    __syncthreads();
  }
  // 6. The draw: the first kept token, in token order, whose inclusive prefix mass exceeds r.
  const double kept = MassAtMost(s, n, max, 0xffffffffu, dscratch);
  const double r = rp.uniform * kept;
  int64_t last_kept = -1;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    if (s[i] != -INFINITY) last_kept = i;
  }
  // (the largest index any thread saw)
  ivals[threadIdx.x] = last_kept;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride && ivals[threadIdx.x + stride] > ivals[threadIdx.x]) {
      ivals[threadIdx.x] = ivals[threadIdx.x + stride];
    }
    __syncthreads();
  }
  last_kept = ivals[0];
  __syncthreads();
  if (threadIdx.x == 0) found = -1;
  double running = 0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const float x = i < n ? s[i] : -INFINITY;
    const double e = x == -INFINITY ? 0.0 : exp(static_cast<double>(x) - max);
    // Inclusive scan: within the warp, then over the warps' totals.
    double incl = e;
    for (int o = 1; o < 32; o <<= 1) {
      const double up = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += up;
    }
    __syncthreads();
    if (lane == 31) warp_totals[warp] = incl;
    __syncthreads();
    double before = running;
    for (int w = 0; w < warp; ++w) before += warp_totals[w];
    double chunk = 0;
    for (int w = 0; w < kWarps; ++w) chunk += warp_totals[w];
    if (e > 0 && before + incl > r)
      atomicMin(reinterpret_cast<unsigned long long*>(&found), static_cast<unsigned long long>(i));
    __syncthreads();
    if (found >= 0) break;
    running += chunk;
  }
  if (threadIdx.x == 0) {
    p.tokens[blockIdx.x] =
        static_cast<int32_t>(found >= 0 ? found : (last_kept >= 0 ? last_kept : 0));
  }
}

}  // namespace

cudaError_t LaunchSample(const SampleParams& params, cudaStream_t stream) {
  if (params.rows == 0) return cudaSuccess;
  if (params.rows > 0x7fffffff || params.vocab <= 0) return cudaErrorInvalidValue;
  SampleKernel<<<static_cast<unsigned>(params.rows), kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
