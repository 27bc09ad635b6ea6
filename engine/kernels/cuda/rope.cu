#include "engine/kernels/cuda/rope.cuh"

namespace framezip::engine::cuda {
namespace {

// One block per token: the d/2 angles are computed once into shared memory (cos/sin in double,
// as the CPU op does, so the two agree to f32 rounding even at 32k positions), then every head
// of the token is rotated with them.
__global__ void RopeKernel(RopeParams p) {
  __shared__ float cos_f[kRopeMaxHalfDim];
  __shared__ float sin_f[kRopeMaxHalfDim];
  const int half = p.head_dim / 2;
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(p.positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float f = pos * p.inv_freq[i];
    double s, c;
    sincos(static_cast<double>(f), &s, &c);
    cos_f[i] = static_cast<float>(c);
    sin_f[i] = static_cast<float>(s);
  }
  __syncthreads();
  float* xt = p.x + t * p.heads * p.head_dim;
  for (int j = threadIdx.x; j < p.heads * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    float* v = xt + h * p.head_dim;
    const float a = v[i], b = v[i + half];
    v[i] = a * cos_f[i] - b * sin_f[i];
    v[i + half] = b * cos_f[i] + a * sin_f[i];
  }
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

}  // namespace framezip::engine::cuda
