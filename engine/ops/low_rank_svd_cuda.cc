// RandomizedSvdCuda (contract in low_rank_cuda.h): the CPU op's steps (low_rank_cpu.cc) with cuBLAS
// for the products and cuSOLVER for the QRs and the small SVD. Like the CPU op it keeps every
// matrix column-major, reading the row-major input as its transpose, so nothing is copied.
#include <cusolverDn.h>

#include <algorithm>
#include <climits>
#include <random>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/low_rank.cuh"
#include "engine/ops/cublas_handle_cuda.h"
#include "engine/ops/cuda_op_util_cuda.h"
#include "engine/ops/low_rank_cuda.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {
namespace {

constexpr std::string_view kOp = "RandomizedSvdCuda";

Status CusolverStatus(cusolverStatus_t status, std::string_view what) {
  if (status == CUSOLVER_STATUS_SUCCESS) return absl::OkStatus();
  if (status == CUSOLVER_STATUS_ALLOC_FAILED) {
    return ResourceExhaustedError("{}: {}: cuSOLVER could not allocate GPU memory", kOp, what);
  }
  return InternalError("{}: {} failed with cuSOLVER status {}", kOp, what,
                       static_cast<int>(status));
}

// One cuSOLVER handle per (host thread, device), as cublas_handle_cuda.cc keeps cuBLAS's: creating
// one costs milliseconds, and a handle is never shared between threads.
StatusOr<cusolverDnHandle_t> CusolverHandleForCurrentDevice() {
  struct ThreadHandles {
    std::vector<cusolverDnHandle_t> handles;
    ~ThreadHandles() {
      for (cusolverDnHandle_t h : handles) {
        if (h != nullptr) cusolverDnDestroy(h);
      }
    }
  };
  thread_local ThreadHandles thread_handles;
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return InternalError("cudaGetDevice: {}", cudaGetErrorString(err));
  }
  auto& handles = thread_handles.handles;
  if (static_cast<size_t>(device) >= handles.size()) handles.resize(device + 1, nullptr);
  if (handles[device] == nullptr) {
    cusolverDnHandle_t created = nullptr;
    FZ_RETURN_IF_ERROR(CusolverStatus(cusolverDnCreate(&created), "cusolverDnCreate"));
    FZ_RETURN_IF_ERROR(CusolverStatus(cusolverDnSetStream(created, CurrentFramezipStream()),
                                      "cusolverDnSetStream"));
    handles[device] = created;
  }
  return handles[device];
}

// What the steps share: the handles, the input, the workspaces and the info slots that every
// cuSOLVER call writes (read once at the end).
struct SvdRun {
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;
  const float* a = nullptr;  // row-major m × n = column-major Aᵀ (n × m, ld n)
  int m = 0, n = 0, r = 0;
  float* tau = nullptr;   // [r]
  float* work = nullptr;  // [lwork]
  int lwork = 0;
  int* info = nullptr;  // [kInfoSlots]: one per call, so a failure names its routine
  int next_info = 0;
};

// Slots: 2 QRs + 2 orgqr per orthonormalisation, at most 1 + 2·q of them, plus gesvd and the
// finiteness count. Bounded by the options' checked power_iterations.
int InfoSlots(int power_iterations) { return 4 * (1 + 2 * power_iterations) + 2; }

// y [m, r] = A · x [n, r], both column-major.
Status MulA(SvdRun& s, const float* x, float* y) {
  const float one = 1.f, zero = 0.f;
  return CublasStatus(cublasSgemm(s.blas, CUBLAS_OP_T, CUBLAS_OP_N, s.m, s.r, s.n, &one, s.a, s.n,
                                  x, s.n, &zero, y, s.m),
                      "RandomizedSvdCuda: A·X");
}

// x [n, r] = Aᵀ · y [m, r], both column-major.
Status MulAt(SvdRun& s, const float* y, float* x) {
  const float one = 1.f, zero = 0.f;
  return CublasStatus(cublasSgemm(s.blas, CUBLAS_OP_N, CUBLAS_OP_N, s.n, s.r, s.m, &one, s.a, s.n,
                                  y, s.m, &zero, x, s.n),
                      "RandomizedSvdCuda: Aᵀ·Y");
}

// Overwrites the column-major rows × r matrix x with an orthonormal basis of its columns
// (Householder QR: orthonormal even for a rank-deficient or zero x).
Status Orthonormalize(SvdRun& s, float* x, int rows) {
  FZ_RETURN_IF_ERROR(CusolverStatus(cusolverDnSgeqrf(s.solver, rows, s.r, x, rows, s.tau, s.work,
                                                     s.lwork, s.info + s.next_info++),
                                    "geqrf"));
  return CusolverStatus(cusolverDnSorgqr(s.solver, rows, s.r, s.r, x, rows, s.tau, s.work, s.lwork,
                                         s.info + s.next_info++),
                        "orgqr");
}

StatusOr<int> WorkspaceFloats(SvdRun& s) {
  int most = 1;
  for (int rows : {s.m, s.n}) {
    int geqrf = 0, orgqr = 0;
    FZ_RETURN_IF_ERROR(CusolverStatus(
        cusolverDnSgeqrf_bufferSize(s.solver, rows, s.r, nullptr, rows, &geqrf), "geqrf size"));
    FZ_RETURN_IF_ERROR(CusolverStatus(
        cusolverDnSorgqr_bufferSize(s.solver, rows, s.r, s.r, nullptr, rows, nullptr, &orgqr),
        "orgqr size"));
    most = std::max({most, geqrf, orgqr});
  }
  int gesvd = 0;
  FZ_RETURN_IF_ERROR(
      CusolverStatus(cusolverDnSgesvd_bufferSize(s.solver, s.n, s.r, &gesvd), "gesvd size"));
  return std::max(most, gesvd);
}

StatusOr<Tensor> DeviceF32(int64_t n, Device device) {
  return Tensor::Empty({n}, DType::kF32, device);
}

}  // namespace

StatusOr<DeviceLowRankFactors> RandomizedSvdCuda(const Tensor& a,
                                                 const RandomizedSvdOptions& options) {
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "a", a));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "a", a, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "a", a, 2));
  if (a.device().is_cpu()) return InvalidArgumentError("{}: a must be on a GPU", kOp);
  const int64_t rows = a.dim(0), cols = a.dim(1);
  if (rows < 1 || rows > INT_MAX) return InvalidArgumentError("{}: rows is {}", kOp, rows);
  if (cols < 1 || cols > INT_MAX) return InvalidArgumentError("{}: cols is {}", kOp, cols);
  if (options.rank < 1 || options.rank > std::min(rows, cols)) {
    return InvalidArgumentError("{}: rank {} is outside [1, min(rows, cols) = {}]", kOp,
                                options.rank, std::min(rows, cols));
  }
  if (options.power_iterations < 0 || options.power_iterations > 64) {
    return InvalidArgumentError("{}: power_iterations is {} (0 to 64)", kOp,
                                options.power_iterations);
  }
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(a.device()));
  ScopedCudaDevice scope(a.device());
  const Device device = a.device();

  SvdRun s;
  s.a = a.data<float>();
  s.m = static_cast<int>(rows);
  s.n = static_cast<int>(cols);
  s.r = options.rank;
  FZ_ASSIGN_OR_RETURN(s.blas, CublasHandleForCurrentDevice());
  FZ_ASSIGN_OR_RETURN(s.solver, CusolverHandleForCurrentDevice());
  FZ_ASSIGN_OR_RETURN(s.lwork, WorkspaceFloats(s));
  const int slots = InfoSlots(options.power_iterations);
  FZ_ASSIGN_OR_RETURN(Tensor work, DeviceF32(s.lwork + s.r, device));
  FZ_ASSIGN_OR_RETURN(Tensor info, Tensor::Empty({slots}, DType::kI32, device));
  s.work = work.data<float>();
  s.tau = s.work + s.lwork;
  s.info = info.data<int32_t>();
  FZ_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(s.info, 0, sizeof(int) * slots, CurrentFramezipStream()), kOp));
  const int finite_slot = slots - 1;
  FZ_RETURN_IF_ERROR(LaunchStatus(
      cuda::LaunchCountNonFinite(s.a, rows * cols, s.info + finite_slot, CurrentFramezipStream()),
      kOp));

  // Ω [n, r] exactly as the CPU op draws it (same engine, distribution and order).
  std::vector<float> omega_host(static_cast<size_t>(s.n) * s.r);
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : omega_host) x = normal(rng);
  FZ_ASSIGN_OR_RETURN(Tensor z, DeviceF32(int64_t{s.n} * s.r, device));
  FZ_ASSIGN_OR_RETURN(Tensor q, DeviceF32(int64_t{s.m} * s.r, device));
  FZ_RETURN_IF_ERROR(CopyBytes(z.raw_data(), device, omega_host.data(), Device::Cpu(),
                               omega_host.size() * sizeof(float)));

  // Range basis Q [m, r] by subspace iteration, re-orthonormalised after every product.
  FZ_RETURN_IF_ERROR(MulA(s, z.data<float>(), q.data<float>()));
  FZ_RETURN_IF_ERROR(Orthonormalize(s, q.data<float>(), s.m));
  for (int it = 0; it < options.power_iterations; ++it) {
    FZ_RETURN_IF_ERROR(MulAt(s, q.data<float>(), z.data<float>()));
    FZ_RETURN_IF_ERROR(Orthonormalize(s, z.data<float>(), s.n));
    FZ_RETURN_IF_ERROR(MulA(s, z.data<float>(), q.data<float>()));
    FZ_RETURN_IF_ERROR(Orthonormalize(s, q.data<float>(), s.m));
  }

  // Bᵀ = Aᵀ·Q (column-major n × r) = W·Σ·Ûᵀ: gesvd's U (n × r) is W, i.e. row-major Wᵀ = vt; its
  // VT (r × r, Ûᵀ) read row-major is Û.
  DeviceLowRankFactors f;
  f.rank = s.r;
  FZ_ASSIGN_OR_RETURN(f.vt, Tensor::Empty({s.r, s.n}, DType::kF32, device));
  FZ_ASSIGN_OR_RETURN(f.singular_values, Tensor::Empty({s.r}, DType::kF32, device));
  FZ_ASSIGN_OR_RETURN(Tensor u_hat, DeviceF32(int64_t{s.r} * s.r, device));
  FZ_RETURN_IF_ERROR(MulAt(s, q.data<float>(), z.data<float>()));
  FZ_RETURN_IF_ERROR(CusolverStatus(
      cusolverDnSgesvd(s.solver, 'S', 'S', s.n, s.r, z.data<float>(), s.n,
                       f.singular_values.data<float>(), f.vt.data<float>(), s.n,
                       u_hat.data<float>(), s.r, s.work, s.lwork, nullptr, s.info + s.next_info++),
      "gesvd"));

  // us = Q·(Û·Σ), computed as usᵀ (column-major r × m) = (ÛΣ)ᵀ·Qᵀ: scaling row j of gesvd's VT by
  // σ_j gives (ÛΣ)ᵀ in column-major, and usᵀ column-major is us row-major.
  FZ_RETURN_IF_ERROR(
      CublasStatus(cublasSdgmm(s.blas, CUBLAS_SIDE_LEFT, s.r, s.r, u_hat.data<float>(), s.r,
                               f.singular_values.data<float>(), 1, u_hat.data<float>(), s.r),
                   "RandomizedSvdCuda: Σ"));
  FZ_ASSIGN_OR_RETURN(f.us, Tensor::Empty({s.m, s.r}, DType::kF32, device));
  const float one = 1.f, zero = 0.f;
  FZ_RETURN_IF_ERROR(CublasStatus(
      cublasSgemm(s.blas, CUBLAS_OP_N, CUBLAS_OP_T, s.r, s.m, s.r, &one, u_hat.data<float>(), s.r,
                  q.data<float>(), s.m, &zero, f.us.data<float>(), s.r),
      "RandomizedSvdCuda: Q·ÛΣ"));

  // One synchronisation: every routine's info and the non-finite count.
  std::vector<int32_t> infos(static_cast<size_t>(slots));
  FZ_RETURN_IF_ERROR(CopyBytes(infos.data(), Device::Cpu(), s.info, device, sizeof(int) * slots));
  if (infos[finite_slot] != 0) {
    return InvalidArgumentError("{}: a has {} entries that are not finite", kOp,
                                infos[finite_slot]);
  }
  for (int i = 0; i < s.next_info; ++i) {
    if (infos[i] != 0) {
      const char* routine = i == s.next_info - 1 ? "gesvd" : (i % 2 == 0 ? "geqrf" : "orgqr");
      return InternalError("{}: cuSOLVER {} failed with info {}", kOp, routine, infos[i]);
    }
  }
  return f;
}

}  // namespace framezip::engine::ops
