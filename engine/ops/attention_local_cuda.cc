// LocalWindowAttention on the GPU: adapter to engine/kernels/cuda/attention_local.cuh. `rows` is a
// host span (the CPU op's contract); here it is copied to a temporary on the GPU for the launch.
// past_k and past_v are already device pointers.
#include <cmath>

#include "engine/kernels/cuda/attention_local.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {

Status LocalWindowAttentionCuda(const Tensor& q, const Tensor& k, const Tensor& v,
                                const float* past_k, const float* past_v, int64_t past,
                                std::span<const int32_t> rows, int64_t h0, int64_t nh,
                                const LocalWindow& params, Tensor& out) {
  constexpr std::string_view kOp = "LocalWindowAttention";
  const int64_t d = q.dim(2);
  if (rows.empty() || nh == 0 || d == 0) return absl::OkStatus();  // nothing to write
  if (d > cuda::kLocalWindowMaxHeadDim) {
    return UnimplementedError("{} on GPU: head_dim {} > {} is not supported yet", kOp, d,
                              cuda::kLocalWindowMaxHeadDim);
  }
  ScopedCudaDevice scope(q.device());
  const int64_t n = static_cast<int64_t>(rows.size());
  // Freed right after the launch: the caching allocator reuses it only for later work on this
  // stream, which runs after the kernel.
  FZ_ASSIGN_OR_RETURN(Tensor device_rows, DeviceI32(rows, q.device()));
  cuda::LocalWindowLaunch p;
  p.q = static_cast<const float*>(q.raw_data());
  p.k = static_cast<const float*>(k.raw_data());
  p.v = static_cast<const float*>(v.raw_data());
  p.past_k = past_k;
  p.past_v = past_v;
  p.out = static_cast<float*>(out.raw_data());
  p.rows = static_cast<const int32_t*>(device_rows.raw_data());
  p.num_rows = n;
  p.past = past;
  p.heads = static_cast<int>(q.dim(1));
  p.kv_heads = static_cast<int>(k.dim(1));
  p.head_dim = static_cast<int>(d);
  p.h0 = static_cast<int>(h0);
  p.nh = static_cast<int>(nh);
  p.window = params.window;
  p.sinks = params.sinks;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  return LaunchStatus(cuda::LaunchLocalWindowAttention(p, CurrentFramezipStream()), kOp);
}

}  // namespace framezip::engine::ops
