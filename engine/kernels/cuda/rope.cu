#include "engine/kernels/cuda/rope.cuh"

namespace framezip::engine::cuda {
namespace {

// One block per token: the d/2 angles are computed once into shared memory (cos/sin in double,
// as the CPU op does, so the two agree to f32 rounding even at 32k positions), then every head
// of the token is rotated with them.
__device__ void TokenAngles(const int32_t* positions, const float* inv_freq, int half,
                            float* cos_f, float* sin_f) {
  const float pos = static_cast<float>(positions[blockIdx.x]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float f = pos * inv_freq[i];
    double s, c;
    sincos(static_cast<double>(f), &s, &c);
    cos_f[i] = static_cast<float>(c);
    sin_f[i] = static_cast<float>(s);
  }
  __syncthreads();
}

// Element i of a head and its partner i + d/2, rotated from `in` into `out` (which may be `in`).
__device__ void RotatePair(const float* in, float* out, int i, int half, const float* cos_f,
                           const float* sin_f) {
  const float a = in[i], b = in[i + half];
  out[i] = a * cos_f[i] - b * sin_f[i];
  out[i + half] = b * cos_f[i] + a * sin_f[i];
}

__global__ void RopeKernel(RopeParams p) {
  __shared__ float cos_f[kRopeMaxHalfDim];
  __shared__ float sin_f[kRopeMaxHalfDim];
  const int half = p.head_dim / 2;
  TokenAngles(p.positions, p.inv_freq, half, cos_f, sin_f);
  float* xt = p.x + static_cast<int64_t>(blockIdx.x) * p.heads * p.head_dim;
  for (int j = threadIdx.x; j < p.heads * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    float* v = xt + h * p.head_dim;
    RotatePair(v, v, i, half, cos_f, sin_f);
  }
}

// One block per token, as RopeKernel: q's and k's heads rotated out of the fused row, v copied.
__global__ void RopeSplitQkvKernel(RopeSplitQkvParams p) {
  __shared__ float cos_f[kRopeMaxHalfDim];
  __shared__ float sin_f[kRopeMaxHalfDim];
  const int half = p.head_dim / 2, d = p.head_dim;
  TokenAngles(p.positions, p.inv_freq, half, cos_f, sin_f);
  const int64_t t = blockIdx.x;
  const int q_width = p.q_heads * d, kv_width = p.kv_heads * d;
  const float* row = p.qkv + t * (q_width + 2 * kv_width);
  float* qt = p.q + t * q_width;
  float* kt = p.k + t * kv_width;
  float* vt = p.v + t * kv_width;
  for (int j = threadIdx.x; j < (p.q_heads + p.kv_heads) * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    if (h < p.q_heads) {
      RotatePair(row + h * d, qt + h * d, i, half, cos_f, sin_f);
    } else {
      const int kh = h - p.q_heads;
      RotatePair(row + q_width + kh * d, kt + kh * d, i, half, cos_f, sin_f);
    }
  }
  for (int j = threadIdx.x; j < kv_width; j += blockDim.x) vt[j] = row[q_width + kv_width + j];
}

}  // namespace

cudaError_t LaunchRope(const RopeParams& params, cudaStream_t stream) {
  if (params.head_dim <= 0 || params.head_dim % 2 != 0 ||
      params.head_dim / 2 > kRopeMaxHalfDim || params.tokens > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  if (params.tokens == 0 || params.heads == 0) return cudaSuccess;
  RopeKernel<<<static_cast<unsigned>(params.tokens), 128, 0, stream>>>(params);
  return cudaGetLastError();
}

cudaError_t LaunchRopeSplitQkv(const RopeSplitQkvParams& params, cudaStream_t stream) {
  if (params.head_dim <= 0 || params.head_dim % 2 != 0 ||
      params.head_dim / 2 > kRopeMaxHalfDim || params.tokens > 0x7fffffff || params.q_heads < 0 ||
      params.kv_heads < 0) {
    return cudaErrorInvalidValue;
  }
  if (params.tokens == 0 || params.q_heads + params.kv_heads == 0) return cudaSuccess;
  RopeSplitQkvKernel<<<static_cast<unsigned>(params.tokens), 128, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
