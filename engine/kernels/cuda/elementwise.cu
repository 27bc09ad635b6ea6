#include "engine/kernels/cuda/elementwise.cuh"
#include "engine/kernels/cuda/float_io.cuh"

namespace framezip::engine::cuda {
namespace {

constexpr int kThreads = 256;

struct SiluMulOp {
  // expf, not __expf: the CPU op uses std::exp and the test holds the two to f32 rounding.
  __device__ float operator()(float g, float u) const { return g / (1.0f + expf(-g)) * u; }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

template <typename Op>
__global__ void BinaryKernel(BinaryParams p, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += stride) {
    p.y[i] = op(p.a[i], p.b[i]);
  }
}

__global__ void GeluKernel(GeluParams p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += stride) {
    const float x = p.x[i];
    if (p.form == GeluForm::kErf) {
      p.y[i] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    } else {
      constexpr float kBeta = 0.79788456080286536f;  // sqrt(2/pi)
      p.y[i] = 0.5f * x * (1.0f + tanhf(kBeta * (x + 0.044715f * x * x * x)));
    }
  }
}

__global__ void AddBiasKernel(AddBiasParams p) {
  const int64_t total = p.rows * p.n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += stride) {
    p.y[i] += LoadAsFloat(p.bias, p.bias_kind, i % p.n);
  }
}

template <typename Op>
cudaError_t LaunchBinary(const BinaryParams& params, cudaStream_t stream) {
  if (params.n == 0) return cudaSuccess;
  BinaryKernel<<<GridStrideBlocks(params.n, kThreads), kThreads, 0, stream>>>(params, Op{});
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchSiluMul(const BinaryParams& params, cudaStream_t stream) {
  return LaunchBinary<SiluMulOp>(params, stream);
}

cudaError_t LaunchAdd(const BinaryParams& params, cudaStream_t stream) {
  return LaunchBinary<AddOp>(params, stream);
}

cudaError_t LaunchGelu(const GeluParams& params, cudaStream_t stream) {
  if (params.n == 0) return cudaSuccess;
  GeluKernel<<<GridStrideBlocks(params.n, kThreads), kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(const AddBiasParams& params, cudaStream_t stream) {
  if (params.rows == 0 || params.n == 0) return cudaSuccess;
  AddBiasKernel<<<GridStrideBlocks(params.rows * params.n, kThreads), kThreads, 0, stream>>>(
      params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
