// DecodeStepPlan (step_plan.h) and KvBackend's planning of a decode step.
#include "engine/llm/step_plan.h"

#include <cstring>
#include <mutex>
#include <utility>

#include "engine/core/device_memory.h"
#include "engine/core/step_counters.h"

namespace framezip::engine::llm {
namespace {

size_t AlignUp(size_t x) { return (x + 255) / 256 * 256; }

template <typename T>
size_t AppendAligned(std::vector<std::byte>& arena, std::span<const T> items) {
  const size_t at = AlignUp(arena.size());
  arena.resize(at + items.size_bytes());
  if (!items.empty()) std::memcpy(arena.data() + at, items.data(), items.size_bytes());
  return at;
}

}  // namespace

DecodeStepPlan::~DecodeStepPlan() {
  if (staging_owner_ == nullptr || staging_ == nullptr) return;
  StagingPool::Entry entry;
  entry.memory = std::move(staging_);
  entry.bytes = staging_bytes_;
  // After this plan's upload (no fence on the CPU; without one the buffer is dropped).
  staging_owner_->GiveAfterQueuedWork(std::move(entry));
}

const ops::KvSlot* DecodeStepPlan::slots(int layer) const {
  return reinterpret_cast<const ops::KvSlot*>(device_arena() +
                                              slot_offsets_[static_cast<size_t>(layer)]);
}

const std::byte* DecodeStepPlan::device_arena() const {
  return static_cast<const std::byte*>(device_.raw_data());
}

bool KvBackend::CanPlanDecode(std::span<Sequence* const> seqs) const {
  if (seqs.empty()) return false;
  for (const Sequence* s : seqs) {
    if (!s->policy->StoresEveryDecodeToken() || s->policy->RowSelectionLayer() >= 0) return false;
    if (kv::IsQuantized(s->kv.precision().full) || s->kv.pool() == nullptr) return false;
  }
  return true;
}

Status KvBackend::PlanDecode(std::span<Sequence* const> seqs, std::span<const int32_t> positions,
                             std::span<const int32_t> token_ids,
                             std::span<const ops::RowSampling> sampling,
                             DecodeStepPlan& plan) const {
  const int64_t b = static_cast<int64_t>(seqs.size());
  if (b == 0 || static_cast<int64_t>(token_ids.size()) != b ||
      static_cast<int64_t>(positions.size()) < b) {
    return InvalidArgumentError("PlanDecode: {} sequences, {} token ids, {} positions", b,
                                token_ids.size(), positions.size());
  }
  if (!CanPlanDecode(seqs)) {
    return FailedPreconditionError("PlanDecode: a sequence's policy or cache needs the eager step");
  }
  const int layers = static_cast<int>(shape_.layers);
  std::vector<std::byte>& arena = plan.host_;
  arena.clear();
  const size_t positions_at = AppendAligned(arena, positions);
  const size_t ids_at = AppendAligned(arena, token_ids);
  plan.host_token_ids_.assign(token_ids.begin(), token_ids.end());
  // The sampler's rows (SampleRowParams holds a double: the 256-byte alignment covers it), its
  // penalised ids and room for the sampled tokens.
  const ops::PackedSampling packed = ops::PackSampling(sampling);
  const size_t sampling_rows_at =
      AppendAligned(arena, std::span<const ops::SampleRowParams>(packed.rows));
  const size_t penalized_at = AppendAligned(arena, std::span<const int32_t>(packed.penalized));
  const size_t sampled_at =
      AppendAligned(arena, std::span<const int32_t>(std::vector<int32_t>(sampling.size(), 0)));
  plan.decode_rows_ = b;
  plan.slot_offsets_.assign(static_cast<size_t>(layers), 0);
  plan.attention_.assign(static_cast<size_t>(layers), ops::PagedDecodePlan{});
  std::vector<ops::KvSlot> slots(static_cast<size_t>(b));
  std::vector<ops::KvSpan> spans;
  std::vector<int32_t> offsets;
  size_t workspace_floats = 0;
  for (int l = 0; l < layers; ++l) {
    spans.clear();
    offsets.assign(1, 0);
    for (int64_t i = 0; i < b; ++i) {
      Sequence& s = *seqs[static_cast<size_t>(i)];
      // The reservation made the slot's page available: this cannot run out.
      FZ_ASSIGN_OR_RETURN(slots[static_cast<size_t>(i)],
                          s.kv.AppendDecodeSlot(l, positions[static_cast<size_t>(i)]));
      s.kv.AppendSpans(l, spans);
      offsets.push_back(static_cast<int32_t>(spans.size()));
    }
    plan.slot_offsets_[static_cast<size_t>(l)] =
        AppendAligned(arena, std::span<const ops::KvSlot>(slots));
    const ops::PagedKv kv{spans, offsets, static_cast<int>(shape_.kv_heads),
                          static_cast<int>(shape_.head_dim)};
    FZ_ASSIGN_OR_RETURN(plan.attention_[static_cast<size_t>(l)],
                        ops::PlanPagedDecode(device_, kv, shape_.heads, arena));
    workspace_floats =
        std::max(workspace_floats, plan.attention_[static_cast<size_t>(l)].workspace_floats);
  }

  // One device buffer: the arena, then the workspace; one copy into it from staging memory.
  const size_t arena_bytes = AlignUp(arena.size());
  FZ_ASSIGN_OR_RETURN(
      plan.device_,
      Tensor::Empty({static_cast<int64_t>(arena_bytes + workspace_floats * sizeof(float))},
                    DType::kU8, device_));
  if (staging_ == nullptr) {
    return InternalError("PlanDecode: the backend has no staging cache");
  }
  FZ_ASSIGN_OR_RETURN(StagingPool::Entry staging, staging_->Take(arena.size()));
  plan.staging_ = std::move(staging.memory);
  plan.staging_bytes_ = staging.bytes;
  plan.staging_owner_ = staging_.get();
  std::memcpy(plan.staging_.get(), arena.data(), arena.size());
  FZ_RETURN_IF_ERROR(
      UploadStepPlan(plan.device_.raw_data(), device_, plan.staging_.get(), arena.size()));
  auto* base = static_cast<std::byte*>(plan.device_.raw_data());
  plan.workspace_ = workspace_floats > 0 ? reinterpret_cast<float*>(base + arena_bytes) : nullptr;
  FZ_ASSIGN_OR_RETURN(plan.positions_,
                      Tensor::FromBuffer(Buffer::View(base, arena_bytes, device_), positions_at,
                                         {static_cast<int64_t>(positions.size())}, DType::kI32));
  FZ_ASSIGN_OR_RETURN(plan.token_ids_, Tensor::FromBuffer(Buffer::View(base, arena_bytes, device_),
                                                          ids_at, {b}, DType::kI32));
  plan.sampling_ = {};
  if (!sampling.empty()) {
    plan.sampling_ = {
        .rows = reinterpret_cast<const ops::SampleRowParams*>(base + sampling_rows_at),
        .penalized = reinterpret_cast<const int32_t*>(base + penalized_at),
        .tokens = reinterpret_cast<int32_t*>(base + sampled_at)};
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::llm
