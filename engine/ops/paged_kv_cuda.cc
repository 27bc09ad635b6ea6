// GatherPagedKv on the GPU: adapter to engine/kernels/cuda/gather_spans.cuh. One launch per 40
// spans of the sequence, the span list in the launch's parameters: no copy, no host round trip,
// int4/int2 pages dequantised on the device.
#include <algorithm>

#include "engine/kernels/cuda/gather_spans.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {

Status GatherPagedKvCuda(const PagedKv& kv, int64_t b, Device device, float* k, float* v) {
  const std::span<const KvSpan> spans = kv.spans_of(b);
  ScopedCudaDevice scope(device);
  int64_t row = 0;
  for (size_t first = 0; first < spans.size(); first += cuda::kMaxGatherSpans) {
    const size_t count = std::min(spans.size() - first, static_cast<size_t>(cuda::kMaxGatherSpans));
    cuda::GatherSpansParams p;
    p.k = k;
    p.v = v;
    p.channels = int64_t{kv.num_kv_heads} * kv.head_dim;
    p.count = static_cast<int32_t>(count);
    for (size_t i = 0; i < count; ++i) {
      const KvSpan& s = spans[first + i];
      cuda::GatherSpanDesc& d = p.spans[i];
      d.k = s.k;
      d.v = s.v;
      d.k_scale = reinterpret_cast<const __half*>(s.k_scale);
      d.k_zero = reinterpret_cast<const __half*>(s.k_zero);
      d.v_scale = reinterpret_cast<const __half*>(s.v_scale);
      d.v_zero = reinterpret_cast<const __half*>(s.v_zero);
      d.dst_row = row;
      d.num_tokens = s.num_tokens;
      d.v_param_stride = s.v_param_stride;
      d.format = static_cast<int32_t>(s.format);  // 0 f32, 1 f16, 2 int4, 3 int2 (checked)
      row += s.num_tokens;
    }
    FZ_RETURN_IF_ERROR(
        LaunchStatus(cuda::LaunchGatherSpans(p, CurrentFramezipStream()), "GatherPagedKv"));
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
