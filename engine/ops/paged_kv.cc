#include "engine/ops/paged_kv.h"

#include <vector>

#include "engine/core/device_memory.h"
#include "engine/core/tensor.h"
#include "engine/ops/cast.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"
#include "engine/ops/kv_quant.h"

namespace framezip::engine::ops {
namespace {

// One span of a host sequence converted to f32 rows k, v [n, C] (either may be null): f32 copied,
// f16 widened, int4/int2 dequantised (kvq's reference maps).
Status GatherSpanOnHost(const KvSpan& s, int64_t channels, float* k, float* v) {
  const int64_t count = s.num_tokens * channels;
  switch (s.format) {
    case kv::KvFormat::kF32:
    case kv::KvFormat::kF16: {
      const DType stored = s.format == kv::KvFormat::kF32 ? DType::kF32 : DType::kF16;
      if (k != nullptr)
        FZ_RETURN_IF_ERROR(ConvertElements(Device::Cpu(), s.k, stored, k, DType::kF32, count));
      if (v != nullptr)
        FZ_RETURN_IF_ERROR(ConvertElements(Device::Cpu(), s.v, stored, v, DType::kF32, count));
      return absl::OkStatus();
    }
    case kv::KvFormat::kInt4:
    case kv::KvFormat::kInt2: {
      const int bits = kv::KvFormatBits(s.format);
      if (k != nullptr) {
        kvq::DequantizeKeys(static_cast<const uint8_t*>(s.k), s.k_scale, s.k_zero, s.num_tokens,
                            channels, bits, k);
      }
      if (v != nullptr) {
        kvq::DequantizeValues(static_cast<const uint8_t*>(s.v), s.v_scale, s.v_zero, s.num_tokens,
                              channels, bits, s.v_param_stride, v);
      }
      return absl::OkStatus();
    }
    case kv::KvFormat::kLowRank:
      break;
  }
  return UnimplementedError("GatherPagedKv: a span has format {}", kv::KvFormatName(s.format));
}

}  // namespace

int64_t PagedKv::tokens(int64_t b) const {
  int64_t n = 0;
  for (const KvSpan& s : spans_of(b)) n += s.num_tokens;
  return n;
}

Status CheckPagedKv(std::string_view op, const PagedKv& kv, int64_t batch) {
  if (kv.num_kv_heads <= 0 || kv.head_dim <= 0) {
    return InvalidArgumentError("{}: paged KV of {} KV heads × {} dims", op, kv.num_kv_heads,
                                kv.head_dim);
  }
  const std::span<const int32_t> offsets = kv.seq_offsets;
  if (static_cast<int64_t>(offsets.size()) != batch + 1 || offsets[0] != 0 ||
      offsets.back() != static_cast<int32_t>(kv.spans.size())) {
    return InvalidArgumentError(
        "{}: paged KV has {} sequence offsets for {} sequences and {} spans", op, offsets.size(),
        batch, kv.spans.size());
  }
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    if (offsets[b + 1] < offsets[b]) {
      return InvalidArgumentError("{}: paged KV sequence offsets decrease at {}", op, b);
    }
  }
  for (size_t i = 0; i < kv.spans.size(); ++i) {
    const KvSpan& s = kv.spans[i];
    if (s.num_tokens < 0 || (s.num_tokens > 0 && (!s.k || !s.v))) {
      return InvalidArgumentError("{}: span {} is malformed", op, i);
    }
    switch (s.format) {
      case kv::KvFormat::kF32:
      case kv::KvFormat::kF16:
        break;
      case kv::KvFormat::kInt4:
      case kv::KvFormat::kInt2:
        if (kv.head_dim % 32 != 0) {
          return InvalidArgumentError("{}: span {} is {} but head_dim {} is not a multiple of 32",
                                      op, i, kv::KvFormatName(s.format), kv.head_dim);
        }
        if (s.num_tokens > 0 && (!s.k_scale || !s.k_zero || !s.v_scale || !s.v_zero)) {
          return InvalidArgumentError("{}: span {} ({}) lacks its scales", op, i,
                                      kv::KvFormatName(s.format));
        }
        if (s.v_param_stride < (s.num_tokens + 7) / 8 * 8) {
          return InvalidArgumentError(
              "{}: span {} has {} tokens but a value parameter stride of {}", op, i, s.num_tokens,
              s.v_param_stride);
        }
        break;
      case kv::KvFormat::kLowRank:
        return UnimplementedError("{}: span {} has format {}", op, i, kv::KvFormatName(s.format));
    }
  }
  return absl::OkStatus();
}

Status GatherPagedKv(const PagedKv& kv, int64_t b, Device device, float* k, float* v) {
  if (b < 0 || b >= kv.batch()) {
    return InvalidArgumentError("GatherPagedKv: sequence {} of {}", b, kv.batch());
  }
  // The offsets bound every span read below (spans_of): checked, not trusted.
  FZ_RETURN_IF_ERROR(CheckPagedKv("GatherPagedKv", kv, kv.batch()));
  // A GPU reads every span in its own format in one kernel (no page goes through the host).
  if (!device.is_cpu()) {
    FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
    return GatherPagedKvCuda(kv, b, device, k, v);
  }
  const int64_t channels = static_cast<int64_t>(kv.num_kv_heads) * kv.head_dim;
  for (const KvSpan& s : kv.spans_of(b)) {
    if (s.num_tokens == 0) continue;
    FZ_RETURN_IF_ERROR(GatherSpanOnHost(s, channels, k, v));
    if (k != nullptr) k += s.num_tokens * channels;
    if (v != nullptr) v += s.num_tokens * channels;
  }
  return absl::OkStatus();
}

StatusOr<GatheredKv> GatherPagedKv(const PagedKv& kv, int64_t b, Device device) {
  if (b < 0 || b >= kv.batch()) {
    return InvalidArgumentError("GatherPagedKv: sequence {} of {}", b, kv.batch());
  }
  FZ_RETURN_IF_ERROR(CheckPagedKv("GatherPagedKv", kv, kv.batch()));  // before tokens(b) reads
  GatheredKv out;
  out.tokens = kv.tokens(b);
  const Shape shape = {out.tokens, kv.num_kv_heads, kv.head_dim};
  FZ_ASSIGN_OR_RETURN(out.k, Tensor::Empty(shape, DType::kF32, device));
  FZ_ASSIGN_OR_RETURN(out.v, Tensor::Empty(shape, DType::kF32, device));
  FZ_RETURN_IF_ERROR(GatherPagedKv(kv, b, device, out.k.data<float>(), out.v.data<float>()));
  return out;
}

Status CheckPastKv(std::string_view op, const PagedKv& past, int64_t kv_heads, int64_t head_dim) {
  if (past.batch() == 0 && past.spans.empty()) return absl::OkStatus();
  FZ_RETURN_IF_ERROR(CheckPagedKv(op, past, 1));
  if (past.num_kv_heads != kv_heads || past.head_dim != head_dim) {
    return InvalidArgumentError("{}: the past has {} KV heads × {} dims, the chunk {} × {}", op,
                                past.num_kv_heads, past.head_dim, kv_heads, head_dim);
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
