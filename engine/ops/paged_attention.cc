#include "engine/ops/paged_attention.h"

#include <cstring>

#include "engine/core/step_counters.h"
#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {
namespace {

// q and out: defined f32 [B, H, d] of one shape on one device, out not aliasing q.
Status CheckQueryAndOut(std::string_view op, const Tensor& q, const Tensor& out) {
  FZ_RETURN_IF_ERROR(CheckDefined(op, "q", q));
  FZ_RETURN_IF_ERROR(CheckDefined(op, "out", out));
  FZ_RETURN_IF_ERROR(CheckDType(op, "q", q, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckDType(op, "out", out, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(op, "q", q, 3));
  FZ_RETURN_IF_ERROR(CheckSameShape(op, "q", q, "out", out));
  FZ_RETURN_IF_ERROR(CheckOnDevice(op, q.device(), {&out}));
  if (out.raw_data() == q.raw_data()) return InvalidArgumentError("{}: out must not alias q", op);
  return absl::OkStatus();
}

// The log-sum-exp output's data: null when none is asked, else checked as f32 [B, H] on q's
// device.
StatusOr<float*> LseOutput(std::string_view op, const Tensor& q, Tensor* lse) {
  if (lse == nullptr) return nullptr;
  FZ_RETURN_IF_ERROR(CheckDefined(op, "lse", *lse));
  FZ_RETURN_IF_ERROR(CheckDType(op, "lse", *lse, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckShape(op, "lse", *lse, {q.dim(0), q.dim(1)}));
  FZ_RETURN_IF_ERROR(CheckOnDevice(op, q.device(), {lse}));
  return lse->data<float>();
}

}  // namespace

Status PagedDecodeAttention(const Tensor& q, const PagedKv& kv, Tensor& out, float scale,
                            Tensor* lse) {
  constexpr std::string_view kOp = "PagedDecodeAttention";
  FZ_RETURN_IF_ERROR(CheckQueryAndOut(kOp, q, out));
  FZ_ASSIGN_OR_RETURN(float* const lse_data, LseOutput(kOp, q, lse));
  FZ_RETURN_IF_ERROR(CheckPagedKv(kOp, kv, q.dim(0)));
  if (q.dim(1) % kv.num_kv_heads != 0 || q.dim(2) != kv.head_dim) {
    return InvalidArgumentError("PagedDecodeAttention: q has {} heads × {} dims, the KV {} × {}",
                                q.dim(1), q.dim(2), kv.num_kv_heads, kv.head_dim);
  }
  if (q.device().is_cpu()) {
    CountLaunches(1);  // counted as the GPU's launch is, so planned and eager steps compare
    return PagedDecodeAttentionCpu(q, kv, scale, out, lse_data);
  }
  // CUDA: q and out on the GPU, every span's pointers device pointers (the GPU page pool's).
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(q.device()));
  return PagedDecodeAttentionCuda(q, kv, scale, out, lse_data);
}

Status PagedDecodeSupports(Device device, int64_t head_dim) {
  if (device.is_cpu() || head_dim == 32 || head_dim == 64 || head_dim == 128) {
    return absl::OkStatus();
  }
  return UnimplementedError(
      "PagedDecodeAttention on {}: head_dim {} (the GPU kernels are built for 32, 64 and 128)",
      DeviceName(device), head_dim);
}

namespace {

size_t AlignArena(std::vector<std::byte>& arena) {
  const size_t at = (arena.size() + 255) / 256 * 256;
  arena.resize(at);
  return at;
}

template <typename T>
void AppendRaw(std::vector<std::byte>& arena, std::span<const T> items) {
  const size_t at = arena.size();
  arena.resize(at + items.size_bytes());
  if (!items.empty()) std::memcpy(arena.data() + at, items.data(), items.size_bytes());
}

}  // namespace

StatusOr<PagedDecodePlan> PlanPagedDecode(Device device, const PagedKv& kv, int64_t heads,
                                          std::vector<std::byte>& arena) {
  constexpr std::string_view kOp = "PagedDecodeAttention (planned)";
  FZ_RETURN_IF_ERROR(CheckPagedKv(kOp, kv, kv.batch()));
  if (heads <= 0 || heads % kv.num_kv_heads != 0) {
    return InvalidArgumentError("{}: {} query heads over {} KV heads", kOp, heads,
                                kv.num_kv_heads);
  }
  PagedDecodePlan plan;
  plan.batch = kv.batch();
  plan.heads = heads;
  plan.num_spans = static_cast<int32_t>(kv.spans.size());
  plan.num_kv_heads = kv.num_kv_heads;
  plan.head_dim = kv.head_dim;
  if (!device.is_cpu()) {
    FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
    FZ_RETURN_IF_ERROR(PlanPagedDecodeCuda(device, kv, heads, arena, plan));
    return plan;
  }
  // CPU: the spans, then the offsets, as the op's PagedKv reads them.
  plan.offset = AlignArena(arena);
  AppendRaw(arena, kv.spans);
  AppendRaw(arena, kv.seq_offsets);
  return plan;
}

Status PagedDecodeAttentionPlanned(const Tensor& q, const PagedDecodePlan& plan,
                                   const std::byte* arena, float* workspace, Tensor& out,
                                   float scale, Tensor* lse) {
  constexpr std::string_view kOp = "PagedDecodeAttention (planned)";
  FZ_RETURN_IF_ERROR(CheckQueryAndOut(kOp, q, out));
  FZ_ASSIGN_OR_RETURN(float* const lse_data, LseOutput(kOp, q, lse));
  if (q.dim(0) != plan.batch || q.dim(1) != plan.heads || q.dim(2) != plan.head_dim) {
    return InvalidArgumentError("{}: q is {}, the plan was made for [{}, {}, {}]", kOp,
                                ShapeString(q.shape()), plan.batch, plan.heads, plan.head_dim);
  }
  if (arena == nullptr) return InvalidArgumentError("{}: no plan arena", kOp);
  if (q.device().is_cpu()) {
    const auto* spans = reinterpret_cast<const KvSpan*>(arena + plan.offset);
    const auto* offsets = reinterpret_cast<const int32_t*>(
        arena + plan.offset + static_cast<size_t>(plan.num_spans) * sizeof(KvSpan));
    const PagedKv kv{std::span(spans, static_cast<size_t>(plan.num_spans)),
                     std::span(offsets, static_cast<size_t>(plan.batch + 1)), plan.num_kv_heads,
                     plan.head_dim};
    CountLaunches(1);  // the CPU's one call stands for the GPU's launch
    return PagedDecodeAttentionCpu(q, kv, scale, out, lse_data);
  }
  if (plan.workspace_floats > 0 && workspace == nullptr) {
    return InvalidArgumentError("{}: the plan needs a workspace of {} floats", kOp,
                                plan.workspace_floats);
  }
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(q.device()));
  return PagedDecodeAttentionPlannedCuda(q, plan, arena, workspace, scale, out, lse_data);
}

}  // namespace framezip::engine::ops
