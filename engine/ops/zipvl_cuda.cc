// ZipVL ops on the GPU: adapters to engine/kernels/cuda/zipvl.cuh and attention.cuh. Scratch
// (probe list, CUB workspace, compacted Q/K/V) is a temporary device tensor per call.
#include "engine/ops/zipvl_cuda.h"

#include <cmath>

#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/attention.cuh"
#include "engine/kernels/cuda/zipvl.cuh"
#include "engine/ops/cuda_op_util_cuda.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {
namespace {

Status CheckGpuF32(std::string_view op, std::string_view name, const Tensor& t, int rank) {
  FZ_RETURN_IF_ERROR(CheckDefined(op, name, t));
  FZ_RETURN_IF_ERROR(CheckDType(op, name, t, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(op, name, t, rank));
  if (t.device().is_cpu()) return InvalidArgumentError("{}: {} must be on a GPU", op, name);
  return CheckDeviceUsable(t.device());
}

}  // namespace

Status ProbeScoresCuda(const Tensor& q, const Tensor& k, std::span<const int32_t> probes,
                       bool per_kv_head, Tensor& a, Tensor& a_norm, Tensor& counts) {
  constexpr std::string_view kOp = "ProbeScores";
  FZ_RETURN_IF_ERROR(CheckGpuF32(kOp, "q", q, 3));
  FZ_RETURN_IF_ERROR(CheckGpuF32(kOp, "k", k, 3));
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, q.device(), {&k, &a, &a_norm, &counts}));
  const int64_t n = q.dim(0), heads = q.dim(1), g = k.dim(1), d = q.dim(2);
  const int64_t groups = per_kv_head ? g : 1;
  if (k.dim(0) != n || k.dim(2) != d || g <= 0 || heads % g != 0 || d > 256 ||
      a.shape() != Shape{groups, n} || a_norm.shape() != Shape{groups, n} ||
      counts.shape() != Shape{n} || a.dtype() != DType::kF32 || a_norm.dtype() != DType::kF32 ||
      counts.dtype() != DType::kI32) {
    return InvalidArgumentError("{}: q {} k {} a {} a_norm {} counts {}", kOp,
                                ShapeString(q.shape()), ShapeString(k.shape()),
                                ShapeString(a.shape()), ShapeString(a_norm.shape()),
                                ShapeString(counts.shape()));
  }
  for (size_t i = 0; i < probes.size(); ++i) {
    if (probes[i] < 0 || probes[i] >= n || (i > 0 && probes[i] <= probes[i - 1])) {
      return InvalidArgumentError("{}: probes must be sorted, distinct and in [0, {})", kOp, n);
    }
  }
  ScopedCudaDevice scope(q.device());
  FZ_ASSIGN_OR_RETURN(Tensor dprobes, DeviceI32(probes, q.device()));
  cuda::ProbeScoresLaunch p;
  p.q = static_cast<const float*>(q.raw_data());
  p.k = static_cast<const float*>(k.raw_data());
  p.n = n;
  p.heads = static_cast<int>(heads);
  p.kv_heads = static_cast<int>(g);
  p.head_dim = static_cast<int>(d);
  p.probes = static_cast<const int32_t*>(dprobes.raw_data());
  p.num_probes = static_cast<int32_t>(probes.size());
  p.per_kv_head = per_kv_head;
  p.a = static_cast<float*>(a.raw_data());
  p.a_norm = static_cast<float*>(a_norm.raw_data());
  p.counts = static_cast<int32_t*>(counts.raw_data());
  return LaunchStatus(cuda::LaunchProbeScores(p, CurrentFramezipStream()), kOp);
}

StatusOr<int64_t> TopPCuda(const Tensor& a, const Tensor& a_norm, double tau, Tensor& indices) {
  constexpr std::string_view kOp = "TopP";
  FZ_RETURN_IF_ERROR(CheckGpuF32(kOp, "a", a, 1));
  FZ_RETURN_IF_ERROR(CheckGpuF32(kOp, "a_norm", a_norm, 1));
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, a.device(), {&a_norm, &indices}));
  const int64_t n = a.dim(0);
  if (a_norm.dim(0) != n || indices.shape() != Shape{n} || indices.dtype() != DType::kI32 ||
      n > 0x7fffffff) {
    return InvalidArgumentError("{}: a {} a_norm {} indices {}", kOp, ShapeString(a.shape()),
                                ShapeString(a_norm.shape()), ShapeString(indices.shape()));
  }
  if (n == 0) return int64_t{0};
  ScopedCudaDevice scope(a.device());
  const size_t ws_bytes = cuda::TopPWorkspaceBytes(n);
  if (ws_bytes == 0) return InternalError("{}: CUB workspace query failed", kOp);
  FZ_ASSIGN_OR_RETURN(
      Tensor ws, Tensor::Empty({static_cast<int64_t>(ws_bytes) + 256}, DType::kU8, a.device()));
  cuda::TopPLaunch p;
  p.a = static_cast<const float*>(a.raw_data());
  p.a_norm = static_cast<const float*>(a_norm.raw_data());
  p.n = n;
  p.tau = tau;
  p.workspace = ws.raw_data();  // device allocations are 256-byte aligned
  p.count = static_cast<int32_t*>(ws.raw_data()) + ws_bytes / sizeof(int32_t);
  p.indices = static_cast<int32_t*>(indices.raw_data());
  FZ_RETURN_IF_ERROR(LaunchStatus(cuda::LaunchTopP(p, CurrentFramezipStream()), kOp));
  int32_t count = 0;
  FZ_RETURN_IF_ERROR(CopyBytes(&count, Device::Cpu(), p.count, a.device(), sizeof(count)));
  return static_cast<int64_t>(count);
}

Status SparsePrefillCuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& indices,
                         int64_t p, Tensor& out) {
  constexpr std::string_view kOp = "SparsePrefill";
  FZ_RETURN_IF_ERROR(CheckGpuF32(kOp, "q", q, 3));
  FZ_RETURN_IF_ERROR(CheckGpuF32(kOp, "k", k, 3));
  FZ_RETURN_IF_ERROR(CheckGpuF32(kOp, "v", v, 3));
  FZ_RETURN_IF_ERROR(CheckGpuF32(kOp, "out", out, 3));
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, q.device(), {&k, &v, &out, &indices}));
  const int64_t t = q.dim(0), heads = q.dim(1), g = k.dim(1), d = q.dim(2);
  if (k.shape() != v.shape() || q.shape() != out.shape() || k.dim(0) != t || k.dim(2) != d ||
      g <= 0 || heads % g != 0 || indices.dtype() != DType::kI32 || indices.numel() < p || p < 0 ||
      p > t) {
    return InvalidArgumentError("{}: q {} k {} v {} out {} with {} important rows", kOp,
                                ShapeString(q.shape()), ShapeString(k.shape()),
                                ShapeString(v.shape()), ShapeString(out.shape()), p);
  }
  if (d > cuda::kAttentionMaxHeadDim) {
    return UnimplementedError("{}: head_dim {} > {}", kOp, d, cuda::kAttentionMaxHeadDim);
  }
  ScopedCudaDevice scope(q.device());
  FZ_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), CurrentFramezipStream()), kOp));
  if (p == 0) return absl::OkStatus();
  // Compacted rows: Q[T] [p, H, d], K[T] and V[T] [p, G, d], and the compacted output.
  FZ_ASSIGN_OR_RETURN(Tensor qc, Tensor::Empty({p, heads, d}, DType::kF32, q.device()));
  FZ_ASSIGN_OR_RETURN(Tensor kc, Tensor::Empty({p, g, d}, DType::kF32, q.device()));
  FZ_ASSIGN_OR_RETURN(Tensor vc, Tensor::Empty({p, g, d}, DType::kF32, q.device()));
  FZ_ASSIGN_OR_RETURN(Tensor oc, Tensor::Empty({p, heads, d}, DType::kF32, q.device()));
  const auto* idx = static_cast<const int32_t*>(indices.raw_data());
  FZ_RETURN_IF_ERROR(LaunchStatus(
      cuda::LaunchGatherRows(static_cast<const float*>(q.raw_data()), heads * d, idx, p,
                             static_cast<float*>(qc.raw_data()), CurrentFramezipStream()),
      kOp));
  FZ_RETURN_IF_ERROR(LaunchStatus(
      cuda::LaunchGatherRows(static_cast<const float*>(k.raw_data()), g * d, idx, p,
                             static_cast<float*>(kc.raw_data()), CurrentFramezipStream()),
      kOp));
  FZ_RETURN_IF_ERROR(LaunchStatus(
      cuda::LaunchGatherRows(static_cast<const float*>(v.raw_data()), g * d, idx, p,
                             static_cast<float*>(vc.raw_data()), CurrentFramezipStream()),
      kOp));
  cuda::AttentionParams ap;
  ap.q = static_cast<const float*>(qc.raw_data());
  ap.k = static_cast<const float*>(kc.raw_data());
  ap.v = static_cast<const float*>(vc.raw_data());
  ap.out = static_cast<float*>(oc.raw_data());
  ap.batch = 1;
  ap.tq = p;
  ap.tk = p;
  ap.heads = static_cast<int>(heads);
  ap.kv_heads = static_cast<int>(g);
  ap.head_dim = static_cast<int>(d);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(d));
  ap.causal = true;
  FZ_RETURN_IF_ERROR(LaunchStatus(cuda::LaunchAttention(ap, CurrentFramezipStream()), kOp));
  return LaunchStatus(
      cuda::LaunchScatterRows(static_cast<const float*>(oc.raw_data()), heads * d, idx, p,
                              static_cast<float*>(out.raw_data()), CurrentFramezipStream()),
      kOp);
}

StatusOr<int64_t> ZipvlSparsePrefillCuda(const Tensor& q, const Tensor& k, const Tensor& v,
                                         std::span<const int32_t> probes, double tau, Tensor& out) {
  const int64_t n = q.rank() == 3 ? q.dim(0) : 0;
  FZ_ASSIGN_OR_RETURN(Tensor a, Tensor::Empty({1, n}, DType::kF32, q.device()));
  FZ_ASSIGN_OR_RETURN(Tensor a_norm, Tensor::Empty({1, n}, DType::kF32, q.device()));
  FZ_ASSIGN_OR_RETURN(Tensor counts, Tensor::Empty({n}, DType::kI32, q.device()));
  FZ_ASSIGN_OR_RETURN(Tensor indices, Tensor::Empty({n}, DType::kI32, q.device()));
  FZ_RETURN_IF_ERROR(ProbeScoresCuda(q, k, probes, false, a, a_norm, counts));
  const Tensor a_row = Tensor::View(a.raw_data(), {n}, DType::kF32, q.device());
  const Tensor norm_row = Tensor::View(a_norm.raw_data(), {n}, DType::kF32, q.device());
  FZ_ASSIGN_OR_RETURN(const int64_t p, TopPCuda(a_row, norm_row, tau, indices));
  FZ_RETURN_IF_ERROR(SparsePrefillCuda(q, k, v, indices, p, out));
  return p;
}

}  // namespace framezip::engine::ops
