#include "engine/ops/paged_attention.h"

#include "engine/ops/cpu_backends.h"
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
  FZ_RETURN_IF_ERROR(CheckCpu(kOp, q));
  FZ_RETURN_IF_ERROR(CheckCpu(kOp, out));
  if (params.kv_dtype != DType::kF32 && params.kv_dtype != DType::kF16) {
    return UnimplementedError("PagedDecodeAttention: KV dtype {} (f32 and f16 only)",
                              DTypeName(params.kv_dtype));
  }
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
    if (spans[i].num_tokens < 0 || (spans[i].num_tokens > 0 && (!spans[i].k || !spans[i].v))) {
      return InvalidArgumentError("PagedDecodeAttention: span {} is malformed", i);
    }
  }
  if (out.raw_data() == q.raw_data()) {
    return InvalidArgumentError("PagedDecodeAttention: out must not alias q");
  }
  return PagedDecodeAttentionCpu(q, spans, span_offsets, params, out);
}

}  // namespace framezip::engine::ops
