#include "engine/kernels/cuda/block_reduce.cuh"
#include "engine/kernels/cuda/float_io.cuh"
#include "engine/kernels/cuda/norm.cuh"

namespace framezip::engine::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps per row: a Qwen2 row (896..3584) is 4..14 loads a thread

template <bool kLayerNorm>
__global__ void __launch_bounds__(kThreads) NormKernel(NormParams p) {
  __shared__ float scratch[kThreads / 32];
  const float* x = p.x + blockIdx.x * p.d;
  float* y = p.y + blockIdx.x * p.d;
  if (p.residual != nullptr) {
    // Fused residual add: the row to normalise is residual + x, stored back as the new residual;
    // from here on it is what the thread reads (its own elements, so y == x stays safe).
    float* residual = p.residual + blockIdx.x * p.d;
    for (int64_t i = threadIdx.x; i < p.d; i += kThreads) residual[i] += x[i];
    x = residual;
  }
  const float inv_d = 1.0f / static_cast<float>(p.d);
  float mean = 0;
  if constexpr (kLayerNorm) {
    float s = 0;
    for (int64_t i = threadIdx.x; i < p.d; i += kThreads) s += x[i];
    mean = BlockSum<kThreads>(s, scratch) * inv_d;
  }
  float sq = 0;
  for (int64_t i = threadIdx.x; i < p.d; i += kThreads) {
    const float c = x[i] - mean;
    sq += c * c;
  }
  const float inv = rsqrtf(BlockSum<kThreads>(sq, scratch) * inv_d + p.eps);
  // Each thread rewrites only the elements it read, so y == x is safe.
  for (int64_t i = threadIdx.x; i < p.d; i += kThreads) {
    float v = (x[i] - mean) * inv * LoadAsFloat(p.weight, p.weight_kind, i);
    if (kLayerNorm && p.bias != nullptr) v += LoadAsFloat(p.bias, p.bias_kind, i);
    y[i] = v;
  }
}

// One block per row, three passes over it (max, sum, write), as the CPU op: e^(x − max) is
// recomputed in the last pass rather than stored, so y == x is safe and nothing is allocated.
__global__ void __launch_bounds__(kThreads) SoftmaxKernel(SoftmaxParams p) {
  __shared__ float scratch[kThreads / 32];
  const float* x = p.x + blockIdx.x * p.n;
  float* y = p.y + blockIdx.x * p.n;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < p.n; i += kThreads) m = fmaxf(m, x[i]);
  const float max = BlockMax<kThreads>(m, scratch);
  if (max == -INFINITY) {  // fully masked row: zeros, not the NaN of 0/0
    for (int64_t i = threadIdx.x; i < p.n; i += kThreads) y[i] = 0.0f;
    return;
  }
  float s = 0;
  for (int64_t i = threadIdx.x; i < p.n; i += kThreads) s += expf(x[i] - max);
  const float inv_sum = 1.0f / BlockSum<kThreads>(s, scratch);
  for (int64_t i = threadIdx.x; i < p.n; i += kThreads) y[i] = expf(x[i] - max) * inv_sum;
}

template <bool kLayerNorm>
cudaError_t Launch(const NormParams& params, cudaStream_t stream) {
  if (params.rows == 0 || params.d == 0) return cudaSuccess;
  if (params.rows > 0x7fffffff) return cudaErrorInvalidValue;
  NormKernel<kLayerNorm><<<static_cast<unsigned>(params.rows), kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchRmsNorm(const NormParams& params, cudaStream_t stream) {
  return Launch<false>(params, stream);
}

cudaError_t LaunchLayerNorm(const NormParams& params, cudaStream_t stream) {
  return Launch<true>(params, stream);
}

cudaError_t LaunchSoftmax(const SoftmaxParams& params, cudaStream_t stream) {
  if (params.rows == 0 || params.n == 0) return cudaSuccess;
  if (params.rows > 0x7fffffff) return cudaErrorInvalidValue;
  SoftmaxKernel<<<static_cast<unsigned>(params.rows), kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
