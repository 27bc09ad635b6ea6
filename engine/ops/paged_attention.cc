#include "engine/ops/paged_attention.h"

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

Status PagedDecodeAttention(const Tensor& q, std::span<const KvSpan> spans,
                            std::span<const int32_t> span_offsets, const PagedDecodeParams& params,
                            Tensor& out) {
  constexpr std::string_view kOp = "PagedDecodeAttention";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "q", q));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "out", out));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "q", q, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "out", out, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "q", q, 3));
  FZ_RETURN_IF_ERROR(CheckSameShape(kOp, "q", q, "out", out));
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, q.device(), {&out}));
  if (params.num_kv_heads <= 0 || q.dim(1) % params.num_kv_heads != 0) {
    return InvalidArgumentError("PagedDecodeAttention: {} query heads, {} KV heads", q.dim(1),
                                params.num_kv_heads);
  }
  if (static_cast<int64_t>(span_offsets.size()) != q.dim(0) + 1 || span_offsets[0] != 0 ||
      span_offsets.back() != static_cast<int32_t>(spans.size())) {
    return InvalidArgumentError(
        "PagedDecodeAttention: span_offsets has {} entries for {} sequences and {} spans",
        span_offsets.size(), q.dim(0), spans.size());
  }
  for (size_t b = 0; b + 1 < span_offsets.size(); ++b) {
    if (span_offsets[b + 1] < span_offsets[b]) {
      return InvalidArgumentError("PagedDecodeAttention: span_offsets decrease at {}", b);
    }
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    const KvSpan& s = spans[i];
    if (s.num_tokens < 0 || (s.num_tokens > 0 && (!s.k || !s.v))) {
      return InvalidArgumentError("PagedDecodeAttention: span {} is malformed", i);
    }
    switch (s.format) {
      case kv::KvFormat::kF32:
      case kv::KvFormat::kF16:
        break;
      case kv::KvFormat::kInt4:
      case kv::KvFormat::kInt2:
        if (q.dim(2) % 32 != 0) {
          return InvalidArgumentError(
              "PagedDecodeAttention: span {} is {} but head_dim {} is not a multiple of 32", i,
              kv::KvFormatName(s.format), q.dim(2));
        }
        if (s.num_tokens > 0 && (!s.k_scale || !s.k_zero || !s.v_scale || !s.v_zero)) {
          return InvalidArgumentError("PagedDecodeAttention: span {} ({}) lacks its scales", i,
                                      kv::KvFormatName(s.format));
        }
        if (s.v_param_stride < (s.num_tokens + 7) / 8 * 8) {
          return InvalidArgumentError(
              "PagedDecodeAttention: span {} has {} tokens but a value parameter stride of {}", i,
              s.num_tokens, s.v_param_stride);
        }
        break;
      case kv::KvFormat::kLowRank:
        return UnimplementedError("PagedDecodeAttention: span {} has format {}", i,
                                  kv::KvFormatName(s.format));
    }
  }
  if (out.raw_data() == q.raw_data()) {
    return InvalidArgumentError("PagedDecodeAttention: out must not alias q");
  }
  if (q.device().is_cpu()) return PagedDecodeAttentionCpu(q, spans, span_offsets, params, out);
  // CUDA: q and out on the GPU, every span's pointers device pointers (the GPU page pool's).
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(q.device()));
  return PagedDecodeAttentionCuda(q, spans, span_offsets, params, out);
}

Status PagedDecodeSupports(Device device, int64_t head_dim) {
  if (device.is_cpu() || head_dim == 64 || head_dim == 128) return absl::OkStatus();
  return UnimplementedError(
      "PagedDecodeAttention on {}: head_dim {} (the GPU kernels are built for 64 and 128)",
      DeviceName(device), head_dim);
}

}  // namespace framezip::engine::ops
