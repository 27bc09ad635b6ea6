// Linear with FP8 E4M3 weights on the GPU through cuBLASLt (linear.h): x is quantised per row to
// E4M3 on the device (cuda::LaunchQuantizeRowsFp8), then one FP8 tensor-core GEMM multiplies the
// two E4M3 operands, accumulates in f32 and applies both scale vectors in its epilogue
// (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: element (j, i) of the column-major product is
// multiplied by w_scale[j] and x_scale[i]), writing f32 y. Products of two E4M3 values are exact
// in f32, so the GEMM differs from an f64 sum over the same quantised operands only by the order
// and rounding of the f32 accumulation.
//
// Per-vector scales in the epilogue are a Hopper feature of cuBLASLt (sm_90): Fp8LinearAvailable
// says whether this device has them, and the engine keeps bf16 weights elsewhere
// (runtime/weight_format.h).
//
// cuBLASLt's FP8 GEMM takes A transposed and B not ("TN"), with leading dimensions that are
// multiples of 16 bytes: W [N, K] row-major is the column-major K×N matrix A read transposed, x
// [M, K] row-major the column-major K×M matrix B, and y [M, N] row-major the column-major N×M D.
// So K must be a multiple of 16 (and N of 4, for y's f32 rows); the quantiser at load refuses
// other shapes.
#include <cublasLt.h>

#include <climits>
#include <map>
#include <mutex>
#include <tuple>

#include "engine/kernels/cuda/cast.cuh"
#include "engine/ops/cublas_handle_cuda.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {
namespace {

// cuBLASLt's workspace for split-K and stream-K kernels (the size its Hopper documentation
// recommends); a temporary from the caching allocator per call.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// One cuBLASLt handle per device, shared by every thread: unlike cublasHandle_t it holds no
// stream or per-call state (the stream is an argument of cublasLtMatmul).
StatusOr<cublasLtHandle_t> LtHandle(int device) {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;  // never destroyed: lives as long as the process
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = handles.find(device); it != handles.end()) return it->second;
  cublasLtHandle_t handle = nullptr;
  FZ_RETURN_IF_ERROR(CublasStatus(cublasLtCreate(&handle), "cublasLtCreate"));
  handles.emplace(device, handle);
  return handle;
}

// The descriptors of one GEMM shape, owned; destroyed with it.
struct Fp8Gemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Fp8Gemm() = default;
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;
  ~Fp8Gemm() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

// The descriptors for y [m, n] = x [m, k] · W [n, k]ᵀ with both scales as vectors; the scale
// pointers are set per call.
Status MakeFp8Gemm(int64_t m, int64_t n, int64_t k, Fp8Gemm& g) {
  FZ_RETURN_IF_ERROR(CublasStatus(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                  "Linear (FP8): cublasLtMatmulDescCreate"));
  const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
  const int32_t outer_vector = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  for (const auto& [attribute, value, size] :
       {std::tuple{CUBLASLT_MATMUL_DESC_TRANSA, static_cast<const void*>(&transpose),
                   sizeof(transpose)},
        {CUBLASLT_MATMUL_DESC_TRANSB, static_cast<const void*>(&none), sizeof(none)},
        {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<const void*>(&outer_vector),
         sizeof(outer_vector)},
        {CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<const void*>(&outer_vector),
         sizeof(outer_vector)}}) {
    FZ_RETURN_IF_ERROR(CublasStatus(cublasLtMatmulDescSetAttribute(g.desc, attribute, value, size),
                                    "Linear (FP8): cublasLtMatmulDescSetAttribute"));
  }
  FZ_RETURN_IF_ERROR(CublasStatus(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_8F_E4M3, k, n, k),
                                  "Linear (FP8): weight layout"));
  FZ_RETURN_IF_ERROR(CublasStatus(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_8F_E4M3, k, m, k),
                                  "Linear (FP8): x layout"));
  FZ_RETURN_IF_ERROR(CublasStatus(cublasLtMatrixLayoutCreate(&g.d, CUDA_R_32F, n, m, n),
                                  "Linear (FP8): y layout"));
  return absl::OkStatus();
}

// cuBLASLt's first heuristic choice for a shape, asked once per (device, m, n, k): the query costs
// tens of microseconds of host time, a decode step's budget for several launches.
StatusOr<cublasLtMatmulAlgo_t> ChooseAlgo(cublasLtHandle_t handle, int device, int64_t m, int64_t n,
                                          int64_t k, const Fp8Gemm& g) {
  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, int64_t, int64_t>, cublasLtMatmulAlgo_t> chosen;
  const auto key = std::tuple{device, m, n, k};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  }
  cublasLtMatmulPreference_t preference = nullptr;
  FZ_RETURN_IF_ERROR(CublasStatus(cublasLtMatmulPreferenceCreate(&preference),
                                  "Linear (FP8): cublasLtMatmulPreferenceCreate"));
  const size_t workspace = kWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(handle, g.desc, g.a, g.b, g.d, g.d, preference, 1,
                                            &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(preference);
  FZ_RETURN_IF_ERROR(CublasStatus(status, "Linear (FP8): cublasLtMatmulAlgoGetHeuristic"));
  if (found == 0) {
    return UnimplementedError(
        "Linear: cuBLASLt has no FP8 kernel with per-channel scales for {}x{}x{} on GPU {} "
        "(it needs an sm_90 GPU); load the model with weight format bf16",
        m, n, k, device);
  }
  std::lock_guard<std::mutex> lock(mu);
  chosen.emplace(key, result.algo);
  return result.algo;
}

}  // namespace

bool Fp8LinearAvailableCuda(Device device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index) !=
      cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return false;
  }
  return major == 9;
}

Status LinearFp8Cuda(const Tensor& x, const Tensor& weight, const Tensor& weight_scale,
                     const Tensor& bias, Tensor& y) {
  const int64_t n = weight.dim(0), k = weight.dim(1);
  const int64_t m = n == 0 ? 0 : y.numel() / n;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) {
    return InvalidArgumentError("Linear: GEMM of {}x{}x{} exceeds cuBLASLt's 32-bit sizes", m, n,
                                k);
  }
  if (k % 16 != 0 || n % 4 != 0) {
    return InvalidArgumentError(
        "Linear: an FP8 weight [{}, {}] needs in % 16 == 0 and out % 4 == 0 (cuBLASLt's FP8 "
        "alignment)",
        n, k);
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  ScopedCudaDevice scope(x.device());
  if (k == 0) {  // an empty sum, which cuBLASLt does not take: y is the bias, or zero
    FZ_RETURN_IF_ERROR(CudaStatus(
        cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), CurrentFramezipStream()), "Linear (FP8)"));
    return bias.defined() ? AddBiasRows(bias, m, n, y) : absl::OkStatus();
  }
  const int device = x.device().index;
  FZ_ASSIGN_OR_RETURN(cublasLtHandle_t handle, LtHandle(device));
  Fp8Gemm gemm;
  FZ_RETURN_IF_ERROR(MakeFp8Gemm(m, n, k, gemm));
  FZ_ASSIGN_OR_RETURN(const cublasLtMatmulAlgo_t algo, ChooseAlgo(handle, device, m, n, k, gemm));

  // Temporaries per call from the caching allocator (device_memory.h), freed in stream order.
  FZ_ASSIGN_OR_RETURN(Tensor x_q, Tensor::Empty({m, k}, DType::kF8E4M3, x.device()));
  FZ_ASSIGN_OR_RETURN(Tensor x_scale, Tensor::Empty({m}, DType::kF32, x.device()));
  FZ_ASSIGN_OR_RETURN(Tensor workspace, Tensor::Empty({static_cast<int64_t>(kWorkspaceBytes)},
                                                      DType::kU8, x.device()));
  cuda::QuantizeRowsFp8Params quantize;
  quantize.x = static_cast<const float*>(x.raw_data());
  quantize.q = static_cast<uint8_t*>(x_q.raw_data());
  quantize.scale = static_cast<float*>(x_scale.raw_data());
  quantize.rows = m;
  quantize.k = k;
  FZ_RETURN_IF_ERROR(LaunchStatus(cuda::LaunchQuantizeRowsFp8(quantize, CurrentFramezipStream()),
                                  "Linear (FP8 rows of x)"));

  const void* a_scale = weight_scale.raw_data();
  const void* b_scale = x_scale.raw_data();
  for (const auto& [attribute, pointer] :
       {std::pair{CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale},
        {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale}}) {
    FZ_RETURN_IF_ERROR(
        CublasStatus(cublasLtMatmulDescSetAttribute(gemm.desc, attribute, pointer, sizeof(void*)),
                     "Linear (FP8): scale pointers"));
  }
  const float alpha = 1.0f, beta = 0.0f;
  CountLaunches(1);
  FZ_RETURN_IF_ERROR(CublasStatus(
      cublasLtMatmul(handle, gemm.desc, &alpha, weight.raw_data(), gemm.a, x_q.raw_data(), gemm.b,
                     &beta, y.raw_data(), gemm.d, y.raw_data(), gemm.d, &algo, workspace.raw_data(),
                     kWorkspaceBytes, CurrentFramezipStream()),
      "Linear (FP8): cublasLtMatmul"));
  return bias.defined() ? AddBiasRows(bias, m, n, y) : absl::OkStatus();
}

}  // namespace framezip::engine::ops
