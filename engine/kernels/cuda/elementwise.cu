#include "engine/kernels/cuda/bilinear_resize.cuh"
#include "engine/kernels/cuda/elementwise.cuh"
#include "engine/kernels/cuda/float_io.cuh"
#include "engine/kernels/cuda/patch_unfold.cuh"

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

__global__ void SiluMulHalvesKernel(SiluMulHalvesParams p) {
  const int64_t total = p.rows * p.width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += stride) {
    const int64_t r = i / p.width, c = i % p.width;
    const float* row = p.in + r * 2 * p.width;
    p.y[i] = SiluMulOp{}(row[c], row[p.width + c]);
  }
}

__global__ void GeluKernel(GeluParams p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += stride) {
    const float x = p.x[i];
    if (p.form == GeluForm::kErf) {
      p.y[i] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    } else if (p.form == GeluForm::kQuick) {
      // The CPU op's x / (1 + e^(-1.702x)): for x -> -inf the denominator overflows to inf and
      // the result is -0, where x · sigmoid would be -inf · 0 = NaN.
      p.y[i] = x / (1.0f + expf(-1.702f * x));
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

cudaError_t LaunchSiluMulHalves(const SiluMulHalvesParams& params, cudaStream_t stream) {
  const int64_t n = params.rows * params.width;
  if (n == 0) return cudaSuccess;
  SiluMulHalvesKernel<<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(params);
  return cudaGetLastError();
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

// ---- Bilinear resize (bilinear_resize.cuh): here rather than in a .cu of its own, because every
// translation unit compiles once per CUDA architecture.

namespace framezip::engine::cuda {
namespace {

struct Tap {
  int64_t i0, i1;
  float w0, w1;
};

// PyTorch's compute_source_index_and_lambda with an explicit size, in float, uncontracted.
__device__ __forceinline__ Tap AxisTap(int64_t in, int64_t out, int64_t d) {
  const float scale = __fdiv_rn(static_cast<float>(in), static_cast<float>(out));
  const float src =
      fmaxf(__fsub_rn(__fmul_rn(scale, __fadd_rn(static_cast<float>(d), 0.5f)), 0.5f), 0.0f);
  int64_t i0 = static_cast<int64_t>(floorf(src));
  i0 = i0 < in - 1 ? i0 : in - 1;
  const float w1 = fminf(fmaxf(__fsub_rn(src, static_cast<float>(i0)), 0.0f), 1.0f);
  return {i0, i0 < in - 1 ? i0 + 1 : i0, __fsub_rn(1.0f, w1), w1};
}

// One thread per output element, grid-stride; the index runs channel-innermost in either layout.
__global__ void BilinearResizeKernel(BilinearResizeParams p) {
  const int64_t total = p.n * p.c * p.h_out * p.w_out;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t n, c, y, x;
    if (p.channels_last) {
      c = e % p.c;
      x = (e / p.c) % p.w_out;
      y = (e / (p.c * p.w_out)) % p.h_out;
      n = e / (p.c * p.w_out * p.h_out);
    } else {
      x = e % p.w_out;
      y = (e / p.w_out) % p.h_out;
      c = (e / (p.w_out * p.h_out)) % p.c;
      n = e / (p.w_out * p.h_out * p.c);
    }
    const Tap a = AxisTap(p.h_in, p.h_out, y);
    const Tap b = AxisTap(p.w_in, p.w_out, x);
    // Element (n, c, row, col) of the input.
    auto at = [&](int64_t row, int64_t col) -> int64_t {
      return p.channels_last ? ((n * p.h_in + row) * p.w_in + col) * p.c + c
                             : ((n * p.c + c) * p.h_in + row) * p.w_in + col;
    };
    const float v00 = LoadAsFloat(p.in, p.kind, at(a.i0, b.i0));
    const float v01 = LoadAsFloat(p.in, p.kind, at(a.i0, b.i1));
    const float v10 = LoadAsFloat(p.in, p.kind, at(a.i1, b.i0));
    const float v11 = LoadAsFloat(p.in, p.kind, at(a.i1, b.i1));
    const float top = __fadd_rn(__fmul_rn(b.w0, v00), __fmul_rn(b.w1, v01));
    const float bottom = __fadd_rn(__fmul_rn(b.w0, v10), __fmul_rn(b.w1, v11));
    StoreFloat(p.out, p.kind, e, __fadd_rn(__fmul_rn(a.w0, top), __fmul_rn(a.w1, bottom)));
  }
}

}  // namespace

cudaError_t LaunchBilinearResize(const BilinearResizeParams& params, cudaStream_t stream) {
  const int64_t total = params.n * params.c * params.h_out * params.w_out;
  if (total == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  BilinearResizeKernel<<<GridStrideBlocks(total, kThreads), kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda

// ---- Patch unfold (patch_unfold.cuh), here for the same reason.

namespace framezip::engine::cuda {
namespace {

__global__ void UnfoldPatchesKernel(UnfoldPatchesParams p) {
  const int64_t g = p.side / p.patch, k = p.channels * p.patch * p.patch;
  const int64_t total = p.images * g * g * k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += stride) {
    const int64_t r = i / k, col = i % k;
    const int64_t b = r / (g * g), gy = (r / g) % g, gx = r % g;
    const int64_t ch = col / (p.patch * p.patch), ky = (col / p.patch) % p.patch,
                  kx = col % p.patch;
    float v = p.pixels[((b * p.channels + ch) * p.side + gy * p.patch + ky) * p.side +
                       gx * p.patch + kx];
    // The round trip through the 16-bit type the patch GEMM reads (StoreFloat rounds to nearest
    // even), as the CPU op's F32ToBF16 / F32ToF16.
    if (p.round_to != FloatKind::kF32) {
      uint16_t bits;
      StoreFloat(&bits, p.round_to, 0, v);
      v = LoadAsFloat(&bits, p.round_to, 0);
    }
    p.cols[i] = v;
  }
}

}  // namespace

cudaError_t LaunchUnfoldPatches(const UnfoldPatchesParams& params, cudaStream_t stream) {
  if (params.patch <= 0 || params.side < params.patch) return cudaErrorInvalidValue;
  const int64_t g = params.side / params.patch;
  const int64_t total = params.images * g * g * params.channels * params.patch * params.patch;
  if (total == 0) return cudaSuccess;
  UnfoldPatchesKernel<<<GridStrideBlocks(total, kThreads), kThreads, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
