// Linear and MatMul on the GPU through cuBLAS (cublasGemmEx; MatMul batched and strided with
// cublasGemmStridedBatchedEx), f32 accumulation throughout.
//
// Weights stay in their dtype. f32 weights: a full-f32 GEMM (CUBLAS_COMPUTE_32F, no TF32), equal
// to the CPU op up to summation order. bf16/f16 weights: cuBLAS needs both operands in one type,
// so x is first rounded to the weight's dtype on the device (one extra pass over x, M·K elements,
// small next to the N·K weight read), then a 16-bit tensor-core GEMM accumulates in f32 into the
// f32 y. That rounding of x is the only difference from the CPU op, which keeps x in f32: about
// 2^-9 (bf16) or 2^-11 (f16) relative per product, averaging out over K.
#include <climits>

#include "engine/kernels/cuda/cast.cuh"
#include "engine/ops/cublas_handle_cuda.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {
namespace {

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

Status CheckGemmDims(std::string_view op, int64_t m, int64_t n, int64_t k) {
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return InvalidArgumentError("{}: GEMM of {}x{}x{} exceeds cuBLAS's 32-bit sizes", op, m, n, k);
  }
  return absl::OkStatus();
}

}  // namespace

Status LinearCuda(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  const int64_t n = weight.dim(0), k = weight.dim(1);
  const int64_t m = n == 0 ? 0 : y.numel() / n;
  FZ_RETURN_IF_ERROR(CheckGemmDims("Linear", m, n, k));
  if (m == 0 || n == 0) return absl::OkStatus();
  ScopedCudaDevice scope(x.device());
  if (k == 0) {  // an empty sum: y is the bias, or zero
    FZ_RETURN_IF_ERROR(CudaStatus(
        cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), CurrentFramezipStream()), "Linear"));
    return bias.defined() ? AddBiasRows(bias, m, n, y) : absl::OkStatus();
  }
  FZ_ASSIGN_OR_RETURN(cublasHandle_t handle, CublasHandleForCurrentDevice());

  const void* a = x.raw_data();
  Tensor x_rounded;  // x in the weight's dtype; freed (after the GEMM: cudaFree synchronises)
  if (weight.dtype() != DType::kF32) {
    // A temporary per call: the caching device allocator (device_memory.h) makes it cheap.
    FZ_ASSIGN_OR_RETURN(x_rounded, Tensor::Empty(x.shape(), weight.dtype(), x.device()));
    cuda::CastParams cast;
    cast.in = x.raw_data();
    cast.out = x_rounded.raw_data();
    cast.n = x.numel();
    cast.in_kind = cuda::FloatKind::kF32;
    cast.out_kind = KindOf(weight.dtype());
    FZ_RETURN_IF_ERROR(
        LaunchStatus(cuda::LaunchCast(cast, CurrentFramezipStream()), "Linear (rounding x)"));
    a = x_rounded.raw_data();
  }
  // Row-major y[M,N] = x[M,K]·W[N,K]ᵀ is column-major yᵀ[N,M] = W·xᵀ with W read transposed.
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t wt = CudaType(weight.dtype());
  CountLaunches(1);
  FZ_RETURN_IF_ERROR(CublasStatus(
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                   static_cast<int>(k), &alpha, weight.raw_data(), wt, static_cast<int>(k), a, wt,
                   static_cast<int>(k), &beta, y.raw_data(), CUDA_R_32F, static_cast<int>(n),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "Linear: cublasGemmEx"));
  return bias.defined() ? AddBiasRows(bias, m, n, y) : absl::OkStatus();
}

Status MatMulCuda(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& c) {
  const int64_t m = a.dim(-2), k = a.dim(-1), n = c.dim(-1);
  const int64_t batch = m * n == 0 ? 0 : c.numel() / (m * n);
  FZ_RETURN_IF_ERROR(CheckGemmDims("MatMul", m, n, k));
  if (batch > INT_MAX) {
    return InvalidArgumentError("MatMul: {} batch entries exceed cuBLAS's 32-bit count", batch);
  }
  if (batch == 0) return absl::OkStatus();
  ScopedCudaDevice scope(a.device());
  if (k == 0)
    return CudaStatus(cudaMemsetAsync(c.raw_data(), 0, c.nbytes(), CurrentFramezipStream()),
                      "MatMul");
  FZ_ASSIGN_OR_RETURN(cublasHandle_t handle, CublasHandleForCurrentDevice());
  // Column-major cᵀ[N,M] = op(b)ᵀ·aᵀ per entry: b row-major [K,N] is column-major [N,K] (ld N) as
  // is; b row-major [N,K] is column-major [K,N] (ld K) and is read transposed. A shared rank-2 b
  // has batch stride 0. 16-bit a and b go to the tensor cores as they are, accumulating in f32.
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t type = CudaType(a.dtype());
  const int ldb = static_cast<int>(transpose_b ? k : n);
  const long long stride_b = b.rank() == 2 ? 0 : k * n;
  CountLaunches(1);
  FZ_RETURN_IF_ERROR(CublasStatus(
      cublasGemmStridedBatchedEx(handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N,
                                 static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                 &alpha, b.raw_data(), type, ldb, stride_b, a.raw_data(), type,
                                 static_cast<int>(k), m * k, &beta, c.raw_data(), CUDA_R_32F,
                                 static_cast<int>(n), m * n, static_cast<int>(batch),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "MatMul: cublasGemmStridedBatchedEx"));
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
