#include <cmath>

#include "bench/gpu/bench_fill.cuh"

namespace framezip::benchgpu {
namespace {

__host__ __device__ inline uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ inline float Normal(uint64_t seed, uint64_t i) {
  const uint64_t r = Mix(seed ^ Mix(i));
  const float u1 = (static_cast<float>(r >> 40) + 1.f) * (1.f / 16777217.f);  // (0, 1]
  const float u2 = static_cast<float>((r >> 16) & 0xffffffu) * (1.f / 16777216.f);
  return sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
}

__global__ void FillNormalKernel(float* x, int64_t n, uint64_t seed, float stddev) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = stddev * Normal(seed, static_cast<uint64_t>(i));
  }
}

__global__ void FillBytesKernel(uint32_t* x, int64_t words, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = static_cast<uint32_t>(Mix(seed ^ Mix(static_cast<uint64_t>(i))));
  }
}

__global__ void PlantKernel(float* q, float* k, int64_t t, int heads, int kv_heads, int d,
                            float fraction, float strength, uint64_t seed) {
  const int rep = heads / kv_heads;
  const int64_t q_elems = t * heads * d, k_elems = t * kv_heads * d;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       e < q_elems + k_elems; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (e < q_elems) {
      const int c = static_cast<int>(e % d);
      const int g = static_cast<int>((e / d) % heads) / rep;
      q[e] += strength * Normal(seed + 1000003ull * (g + 1), static_cast<uint64_t>(c));
    } else {
      const int64_t ek = e - q_elems;
      const int c = static_cast<int>(ek % d);
      const int g = static_cast<int>((ek / d) % kv_heads);
      const int64_t pos = ek / (static_cast<int64_t>(d) * kv_heads);
      const float u =
          static_cast<float>(Mix(seed * 7 + static_cast<uint64_t>(pos)) >> 40) * (1.f / 16777216.f);
      if (u < fraction) {
        k[ek] += strength * Normal(seed + 1000003ull * (g + 1), static_cast<uint64_t>(c));
      }
    }
  }
}

int Blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<int>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

}  // namespace

cudaError_t FillNormal(float* x, int64_t n, uint64_t seed, float stddev, cudaStream_t stream) {
  FillNormalKernel<<<Blocks(n), 256, 0, stream>>>(x, n, seed, stddev);
  return cudaGetLastError();
}

cudaError_t FillBytes(void* x, int64_t bytes, uint64_t seed, cudaStream_t stream) {
  FillBytesKernel<<<Blocks(bytes / 4), 256, 0, stream>>>(static_cast<uint32_t*>(x), bytes / 4,
                                                         seed);
  return cudaGetLastError();
}

cudaError_t PlantSalientTokens(float* q, float* k, int64_t t, int heads, int kv_heads, int head_dim,
                               float salient_fraction, float strength, uint64_t seed,
                               cudaStream_t stream) {
  const int64_t n = t * (heads + kv_heads) * static_cast<int64_t>(head_dim);
  PlantKernel<<<Blocks(n), 256, 0, stream>>>(q, k, t, heads, kv_heads, head_dim, salient_fraction,
                                             strength, seed);
  return cudaGetLastError();
}

}  // namespace framezip::benchgpu
