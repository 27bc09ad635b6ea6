// KvBackend's per-sequence attention middles (kv_backend.h): what happens between a layer's RoPE
// and its o_proj for one prefill chunk (the policy's plan, dense or sparse attention over the
// cache, the KV append) and for a batch of decode tokens (the KV write, one paged attention over
// every sequence's pages, the residual-window recompression).
#include <algorithm>
#include <array>
#include <chrono>
#include <vector>

#include "common/logging.h"
#include "engine/core/device_memory.h"
#include "engine/core/thread_pool.h"
#include "engine/llm/kv_backend.h"
#include "engine/llm/step_plan.h"
#include "engine/ops/kv_slots.h"
#include "engine/ops/attention.h"
#include "engine/ops/attention_sparse.h"
#include "engine/ops/paged_attention.h"

namespace framezip::engine::llm {
namespace {

// The policy's treatment of U rows in the sparse attention op's terms.
ops::RestRows RestRowsOf(const compress::PrefillLayerPlan& plan) {
  switch (plan.u_rows) {
    case compress::URows::kAttendImportant:
      return {ops::RestRows::Mode::kImportant, {}};
    case compress::URows::kLocal:
      return {ops::RestRows::Mode::kLocal, {plan.u_window, plan.u_sinks}};
    case compress::URows::kSkip:
      break;
  }
  return {};
}

// The policy's view of a layer's activations: the tensors themselves where it reads them on the
// decoder's device, else host copies.
struct PolicyView {
  Tensor q, k, v;
};

StatusOr<PolicyView> ViewFor(const compress::CompressionPolicy& policy, Device device,
                             const Tensor& q, const Tensor& k, const Tensor& v) {
  if (policy.RunsOn(device)) return PolicyView{q, k, v};
  PolicyView host;
  FZ_ASSIGN_OR_RETURN(host.q, q.To(Device::Cpu()));
  FZ_ASSIGN_OR_RETURN(host.k, k.To(Device::Cpu()));
  FZ_ASSIGN_OR_RETURN(host.v, v.To(Device::Cpu()));
  return host;
}

}  // namespace

Status KvBackend::AttendPrefillChunk(int l, Sequence& seq, std::span<const int32_t> positions,
                                     const uint8_t* visual, const Tensor& q, const Tensor& k,
                                     const Tensor& v, Tensor& attn) const {
  const int64_t t = q.dim(0), nh = shape_.heads, g = shape_.kv_heads, d = shape_.head_dim;
  const int64_t past = seq.kv.num_tokens(l);
  compress::PrefillLayerPlan plan;
  plan.classes.assign(static_cast<size_t>(t), kv::kFull);
  const auto t_select = std::chrono::steady_clock::now();
  {
    FZ_ASSIGN_OR_RETURN(const PolicyView view, ViewFor(*seq.policy, device_, q, k, v));
    FZ_RETURN_IF_ERROR(seq.policy->PlanPrefillLayer(
        compress::PrefillLayerInputs{l, &view.q, &view.k, &view.v, positions.data(), past, visual,
                                     static_cast<int>(shape_.layers)},
        plan));
  }
  compress::PrefillStats& stats = seq.prefill_stats;
  stats.selection_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_select)
          .count();
  if (plan.classes.size() != static_cast<size_t>(t)) {
    return InternalError("policy {}: {} token classes for {} tokens", seq.policy->name(),
                         plan.classes.size(), t);
  }
  if (stats.tokens.size() != static_cast<size_t>(shape_.layers)) {
    stats.Reset(static_cast<int>(shape_.layers));
  }
  stats.tokens[l] += t;
  if (visual != nullptr) stats.visual[l] += std::count(visual, visual + t, uint8_t{1});
  for (uint8_t c : plan.classes) stats.kept[l] += (c == kv::kFull || c == kv::kImportant) ? 1 : 0;

  // Earlier chunks' keys (all at earlier positions) come first in the attention's key sequence:
  // the layer's pages (and AttentionPack's blocks, rebuilt) as the ops read a past.
  std::vector<ops::KvSpan> past_spans;
  Tensor rebuilt_blocks;
  std::array<int32_t, 2> past_offsets;
  ops::PagedKv past_kv;
  if (past > 0) {
    FZ_RETURN_IF_ERROR(seq.kv.AppendPastSpans(l, past_spans, rebuilt_blocks));
    past_kv = seq.kv.OneSequence(past_spans, past_offsets);
  }
  if (plan.sparse) {
    // ZipVL / FastV: attention over the compacted important rows only (engine/ops/
    // attention_sparse.h); the linear layers and the MLP stay dense.
    std::vector<std::vector<int32_t>> shared;
    std::span<const std::vector<int32_t>> important = plan.important_per_kv_head;
    if (important.empty()) {
      shared.push_back(std::move(plan.important));
      important = shared;
    }
    FZ_RETURN_IF_ERROR(
        ops::SparsePrefillAttention(q, k, v, past_kv, important, RestRowsOf(plan), attn));
  } else {
    FZ_ASSIGN_OR_RETURN(Tensor q4, q.Reshape({1, t, nh, d}));
    FZ_ASSIGN_OR_RETURN(Tensor attn4, attn.Reshape({1, t, nh, d}));
    Tensor k4, v4;
    if (past == 0) {
      FZ_ASSIGN_OR_RETURN(k4, k.Reshape({1, t, g, d}));
      FZ_ASSIGN_OR_RETURN(v4, v.Reshape({1, t, g, d}));
    } else {
      // Dense attention reads one key sequence: the past gathered, this chunk's rows after it.
      FZ_ASSIGN_OR_RETURN(k4, Empty({1, past + t, g, d}));
      FZ_ASSIGN_OR_RETURN(v4, Empty({1, past + t, g, d}));
      FZ_RETURN_IF_ERROR(
          ops::GatherPagedKv(past_kv, 0, device_, k4.data<float>(), v4.data<float>()));
      FZ_RETURN_IF_ERROR(
          CopyBytes(k4.data<float>() + past * g * d, device_, k.raw_data(), device_, k.nbytes()));
      FZ_RETURN_IF_ERROR(
          CopyBytes(v4.data<float>() + past * g * d, device_, v.raw_data(), device_, v.nbytes()));
    }
    ops::AttentionParams params;
    params.causal = true;
    params.q_offset = past;
    params.allow_bf16_tensor_cores = bf16_attention_;
    FZ_RETURN_IF_ERROR(ops::Attention(q4, k4, v4, params, attn4));
  }
  FZ_RETURN_IF_ERROR(
      seq.kv.Append(l, k.data<float>(), v.data<float>(), positions.data(), t, plan.classes.data()));
  if (plan.low_rank_rows.empty()) return absl::OkStatus();
  const Status block = low_rank_.StoreChunkRows(l, seq, positions, plan, k, v);
  if (block.code() != absl::StatusCode::kResourceExhausted) return block;
  // The KV budget cannot hold the block (its bytes are known only once it is factorised, so the
  // step could not reserve them). Its rows go to full-precision pages instead: the step reserved
  // a page slot in the full format for every row of the chunk, so this cannot run out, and the
  // layer stays whole instead of failing the step part-way.
  std::vector<uint8_t> as_pages(static_cast<size_t>(t), kv::kDrop);
  for (const int32_t r : plan.low_rank_rows) as_pages[static_cast<size_t>(r)] = kv::kFull;
  if (++stats.low_rank_fallbacks == 1) {  // once per turn: the pressure, not every layer
    FZ_LOG_WARN("{}: the KV budget cannot hold a {}-row block ({}); its rows are stored in pages",
                seq.policy->name(), plan.low_rank_rows.size(), MessageOf(block));
  }
  return seq.kv.Append(l, k.data<float>(), v.data<float>(), positions.data(), t, as_pages.data());
}

Status KvBackend::AttendDecodeRows(int l, std::span<Sequence* const> seqs,
                                   std::span<const int32_t> positions, const Tensor& q,
                                   const Tensor& k, const Tensor& v, Tensor& attn) const {
  const int64_t b = static_cast<int64_t>(seqs.size()), g = shape_.kv_heads, d = shape_.head_dim;
  const size_t row = static_cast<size_t>(g * d);
  std::vector<ops::KvSpan> spans;
  std::vector<int32_t> offsets(1, 0);
  for (int64_t i = 0; i < b; ++i) {
    Sequence& s = *seqs[i];
    const float* ki = k.data<float>() + i * row;
    const float* vi = v.data<float>() + i * row;
    const int32_t pos = positions[static_cast<size_t>(i)];
    const bool store = s.policy->OnDecodeWrite(l, pos);
    if (!store && l + 1 == shape_.layers) ++s.prefill_stats.decode_unstored;
    if (store) FZ_RETURN_IF_ERROR(s.kv.Append(l, ki, vi, &pos, 1));
    s.kv.AppendSpans(l, spans);
    if (!store) {
      // Attended to this step only: one extra f32 span straight from this step's k/v rows.
      ops::KvSpan unstored;
      unstored.k = ki;
      unstored.v = vi;
      unstored.num_tokens = 1;
      unstored.format = kv::KvFormat::kF32;
      spans.push_back(unstored);
    }
    offsets.push_back(static_cast<int32_t>(spans.size()));
  }
  // The head size was checked against the device's kernels when the decoder was made
  // (ops::PagedDecodeSupports).
  const ops::PagedKv paged_kv{spans, offsets, static_cast<int>(g), static_cast<int>(d)};
  if (!HoldsLowRankBlocks(l, seqs)) {
    FZ_RETURN_IF_ERROR(ops::PagedDecodeAttention(q, paged_kv, attn));
    return RecompressResiduals(l, seqs, q);
  }
  // AttentionPack: the pages' share of the whole batch in one paged attention, with each row's
  // log-sum-exp; then each sequence's blocks merge in.
  FZ_ASSIGN_OR_RETURN(Tensor lse, Empty({b, shape_.heads}));
  FZ_RETURN_IF_ERROR(ops::PagedDecodeAttention(q, paged_kv, attn, 0, &lse));
  FZ_RETURN_IF_ERROR(MergeLowRankShares(l, seqs, q, lse, attn));
  return RecompressResiduals(l, seqs, q);
}

bool KvBackend::HoldsLowRankBlocks(int l, std::span<Sequence* const> seqs) {
  for (const Sequence* s : seqs) {
    if (!s->kv.low_rank_blocks(l).empty()) return true;
  }
  return false;
}

Status KvBackend::MergeLowRankShares(int l, std::span<Sequence* const> seqs, const Tensor& q,
                                     const Tensor& lse, Tensor& attn) const {
  const int64_t b = static_cast<int64_t>(seqs.size()), nh = shape_.heads, d = shape_.head_dim;
  auto merge_blocks = [&](int64_t i) -> Status {
    Sequence& s = *seqs[i];
    if (s.kv.low_rank_blocks(l).empty()) return absl::OkStatus();
    FZ_ASSIGN_OR_RETURN(const Tensor qi, q.Slice(i, i + 1));
    FZ_ASSIGN_OR_RETURN(const Tensor q_row, qi.Reshape({nh, d}));
    FZ_ASSIGN_OR_RETURN(const Tensor lse_i, lse.Slice(i, i + 1));
    FZ_ASSIGN_OR_RETURN(const Tensor lse_row, lse_i.Reshape({nh}));
    FZ_ASSIGN_OR_RETURN(Tensor oi, attn.Slice(i, i + 1));
    FZ_ASSIGN_OR_RETURN(Tensor out_row, oi.Reshape({nh, d}));
    return low_rank_.AttendDecode(l, s, q_row, lse_row, out_row);
  };
  if (b == 1 || !device_.is_cpu()) {  // a GPU's kernels queue on one stream, in order
    for (int64_t i = 0; i < b; ++i) FZ_RETURN_IF_ERROR(merge_blocks(i));
    return absl::OkStatus();
  }
  // The sequences in parallel (a batch of many short sessions would otherwise run one small
  // block attention after another; the kernels' own ParallelFor runs inline inside a task).
  std::vector<Status> results(static_cast<size_t>(b));
  ComputePool().ParallelFor(b, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) results[static_cast<size_t>(i)] = merge_blocks(i);
  });
  for (const Status& st : results) FZ_RETURN_IF_ERROR(st);
  return absl::OkStatus();
}

Status KvBackend::SettleStatistics(std::span<Sequence* const> seqs) const {
  return low_rank_.SettleStatistics(seqs);
}

Status KvBackend::AttendDecodePlanned(int l, std::span<Sequence* const> seqs,
                                      const DecodeStepPlan& plan, const Tensor& q,
                                      const Tensor& k, const Tensor& v, Tensor& attn) const {
  const int64_t b = static_cast<int64_t>(seqs.size());
  if (b != plan.decode_rows() || q.dim(0) != b) {
    return InternalError("planned decode: {} sequences, {} query rows, a plan for {}", b,
                         q.dim(0), plan.decode_rows());
  }
  FZ_RETURN_IF_ERROR(ops::WriteKvSlots(device_, plan.slots(l), b, shape_.kv_heads * shape_.head_dim,
                                       k.data<float>(), v.data<float>()));
  if (!HoldsLowRankBlocks(l, seqs)) {
    FZ_RETURN_IF_ERROR(ops::PagedDecodeAttentionPlanned(q, plan.attention(l), plan.device_arena(),
                                                        plan.workspace(), attn));
    return RecompressResiduals(l, seqs, q);
  }
  // AttentionPack: the planned pages' share with each row's log-sum-exp, then the blocks'.
  FZ_ASSIGN_OR_RETURN(Tensor lse, Empty({b, shape_.heads}));
  FZ_RETURN_IF_ERROR(ops::PagedDecodeAttentionPlanned(q, plan.attention(l), plan.device_arena(),
                                                      plan.workspace(), attn, 0, &lse));
  FZ_RETURN_IF_ERROR(MergeLowRankShares(l, seqs, q, lse, attn));
  return RecompressResiduals(l, seqs, q);
}

Status KvBackend::RecompressResiduals(int l, std::span<Sequence* const> seqs,
                                      const Tensor& q) const {
  const int64_t b = static_cast<int64_t>(seqs.size()), g = shape_.kv_heads, d = shape_.head_dim;
  // Decode residual window (docs/methods.md §1.2 / KIVI's R): once a layer holds the policy's
  // window of full-precision tokens, they are classified and requantised into the class formats.
  // This step's attention above still read them at full precision.
  std::vector<uint8_t> classes;
  for (int64_t i = 0; i < b; ++i) {
    Sequence& s = *seqs[i];
    const int window = s.policy->ResidualWindow();
    if (window <= 0 || s.kv.residual_tokens(l) < window) continue;
    if (const std::optional<compress::LowRankSpec> spec = s.policy->ResidualLowRank(l)) {
      FZ_RETURN_IF_ERROR(low_rank_.StoreResidual(l, s, *spec));
      continue;
    }
    const int64_t n = s.kv.full_tokens(l);
    FZ_ASSIGN_OR_RETURN(Tensor window_k, Empty({n, g, d}));
    FZ_RETURN_IF_ERROR(s.kv.GatherFull(l, window_k.data<float>(), nullptr));
    FZ_ASSIGN_OR_RETURN(const Tensor qi, q.Slice(i, i + 1));
    FZ_ASSIGN_OR_RETURN(const PolicyView view, ViewFor(*s.policy, device_, qi, window_k, window_k));
    classes.clear();
    FZ_RETURN_IF_ERROR(s.policy->ClassifyResidual(l, view.q, view.k, classes));
    FZ_RETURN_IF_ERROR(s.kv.CompressResidual(l, classes));
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::llm
