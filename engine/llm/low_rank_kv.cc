// LowRankKv (low_rank_kv.h): blocks built from a prefill chunk's rows and from the residual
// window, and decode attention that merges the blocks' shares (read through ops/low_rank.h: keys
// rebuilt a tile at a time, values never) with the pages' share by their maxima.
#include "engine/llm/low_rank_kv.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/kv/low_rank_block.h"
#include "engine/ops/attention_merge.h"
#include "engine/ops/low_rank.h"
#include "engine/ops/low_rank_cuda.h"

namespace framezip::engine::llm {
namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// `n` floats at `src` in the decoder's device memory into `dst` on the host.
Status ToHostFloats(Device device, const float* src, int64_t n, std::vector<float>& dst) {
  dst.resize(static_cast<size_t>(n));
  if (n == 0) return absl::OkStatus();
  return CopyBytes(dst.data(), Device::Cpu(), src, device, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace

Status LowRankKv::StoreChunkRows(int l, Sequence& seq, std::span<const int32_t> positions,
                                 const compress::PrefillLayerPlan& plan, const Tensor& dev_k,
                                 const Tensor& dev_v) const {
  const auto start = std::chrono::steady_clock::now();
  // The SVD runs on the host: a GPU's chunk rows come over once.
  Tensor k = dev_k, v = dev_v;
  if (!device_.is_cpu()) {
    FZ_ASSIGN_OR_RETURN(k, dev_k.To(Device::Cpu()));
    FZ_ASSIGN_OR_RETURN(v, dev_v.To(Device::Cpu()));
  }
  const int64_t hd = shape_.kv_heads * shape_.head_dim;
  const size_t n = plan.low_rank_rows.size();
  std::vector<float> rows_k(n * static_cast<size_t>(hd)), rows_v(rows_k.size());
  std::vector<int32_t> rows_pos(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t r = plan.low_rank_rows[i];
    if (r < 0 || r >= k.dim(0) || (i > 0 && r <= plan.low_rank_rows[i - 1])) {
      return InternalError("policy {}: low-rank row {} out of order or range", seq.policy->name(),
                           r);
    }
    std::copy_n(k.data<float>() + r * hd, hd, rows_k.data() + i * hd);
    std::copy_n(v.data<float>() + r * hd, hd, rows_v.data() + i * hd);
    rows_pos[i] = positions[static_cast<size_t>(r)];
  }
  FZ_ASSIGN_OR_RETURN(
      kv::LowRankBlock block,
      kv::MakeLowRankBlock(rows_k, rows_v, rows_pos, static_cast<int>(shape_.kv_heads),
                           static_cast<int>(shape_.head_dim), shape_.rope,
                           {.rank_k = plan.low_rank_k,
                            .rank_v = plan.low_rank_v,
                            .factors = plan.low_rank_factors,
                            .seed = plan.low_rank_seed}));
  FZ_RETURN_IF_ERROR(seq.kv.AppendLowRankBlock(l, std::move(block)));
  seq.prefill_stats.low_rank_build_ms += MillisecondsSince(start);
  return absl::OkStatus();
}

Status LowRankKv::StoreResidual(int l, Sequence& seq, const compress::LowRankSpec& spec) const {
  const auto start = std::chrono::steady_clock::now();
  const int64_t n = seq.kv.full_tokens(l), hd = shape_.kv_heads * shape_.head_dim;
  if (n == 0) return absl::OkStatus();
  std::vector<float> k(static_cast<size_t>(n * hd)), v(k.size());
  if (device_.is_cpu()) {
    FZ_RETURN_IF_ERROR(seq.kv.GatherFull(l, k.data(), v.data()));
  } else {  // the window's pages are on the GPU: gathered there, factorised on the host
    FZ_ASSIGN_OR_RETURN(Tensor dk, Empty({n, hd}));
    FZ_ASSIGN_OR_RETURN(Tensor dv, Empty({n, hd}));
    FZ_RETURN_IF_ERROR(seq.kv.GatherFull(l, dk.data<float>(), dv.data<float>()));
    FZ_RETURN_IF_ERROR(ToHostFloats(device_, dk.data<float>(), n * hd, k));
    FZ_RETURN_IF_ERROR(ToHostFloats(device_, dv.data<float>(), n * hd, v));
  }
  std::vector<int32_t> positions = seq.kv.FullPositions(l);
  // A block's rows ascend by position; the window's storage order may not (a requantised window
  // is stored again after older pages).
  std::vector<size_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return positions[a] < positions[b]; });
  std::vector<float> sorted_k(k.size()), sorted_v(v.size());
  std::vector<int32_t> sorted_positions(positions.size());
  for (size_t i = 0; i < order.size(); ++i) {
    std::copy_n(k.data() + order[i] * hd, hd, sorted_k.data() + i * hd);
    std::copy_n(v.data() + order[i] * hd, hd, sorted_v.data() + i * hd);
    sorted_positions[i] = positions[order[i]];
  }
  FZ_ASSIGN_OR_RETURN(
      kv::LowRankBlock block,
      kv::MakeLowRankBlock(sorted_k, sorted_v, sorted_positions, static_cast<int>(shape_.kv_heads),
                           static_cast<int>(shape_.head_dim), shape_.rope,
                           {.rank_k = spec.rank_k,
                            .rank_v = spec.rank_v,
                            .factors = spec.factors,
                            .seed = spec.seed}));
  // The block first, then the window's pages go. The block is charged to the KV budget and may
  // not fit: then the pages stay, nothing is lost, and the window waits at full precision for a
  // later step (failing here would leave this step's token in some layers and not in others).
  const Status appended = seq.kv.AppendLowRankBlock(l, std::move(block));
  if (appended.code() == absl::StatusCode::kResourceExhausted) return absl::OkStatus();
  FZ_RETURN_IF_ERROR(appended);
  FZ_RETURN_IF_ERROR(seq.kv.DropResidual(l));
  seq.prefill_stats.low_rank_build_ms += MillisecondsSince(start);
  return absl::OkStatus();
}

Status LowRankKv::AttendDecode(int l, Sequence& seq, const Tensor& q, const Tensor& pages_lse,
                               Tensor& attn) const {
  const int64_t nh = shape_.heads, d = shape_.head_dim;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const auto start = std::chrono::steady_clock::now();
  std::vector<kv::LowRankBlock>& blocks = seq.kv.mutable_low_rank_blocks(l);
  const int64_t parts = static_cast<int64_t>(blocks.size());

  // Each block's share, stacked: maxima and sums [P, nh], unnormalised outputs [P, nh, d], and
  // its tokens' weights e^(s − max) [nh, T_i] one after another in one buffer.
  std::vector<int64_t> first(static_cast<size_t>(parts) + 1, 0);
  for (int64_t i = 0; i < parts; ++i) first[i + 1] = first[i] + blocks[i].tokens();
  FZ_ASSIGN_OR_RETURN(Tensor part_max, Empty({parts, nh}));
  FZ_ASSIGN_OR_RETURN(Tensor part_sum, Empty({parts, nh}));
  FZ_ASSIGN_OR_RETURN(Tensor part_out, Empty({parts, nh, d}));
  FZ_ASSIGN_OR_RETURN(Tensor weights, Empty({nh * first.back()}));
  const auto row_of = [&](Tensor& t, int64_t i, Shape shape) {
    const int64_t n = NumElements(shape);
    return Tensor::View(t.data<float>() + i * n, std::move(shape), DType::kF32, device_);
  };
  const auto weights_of = [&](int64_t i) {
    return Tensor::View(weights.data<float>() + nh * first[i], {nh, blocks[i].tokens()},
                        DType::kF32, device_);
  };
  const ops::LowRankAttentionShape attention_shape{
      .num_heads = static_cast<int>(nh),
      .num_kv_heads = static_cast<int>(shape_.kv_heads),
      .head_dim = static_cast<int>(d)};
  if (device_.is_cpu()) {
    thread_local std::vector<int32_t> positions;
    thread_local ops::BlockAttention part;
    for (int64_t i = 0; i < parts; ++i) {
      const kv::LowRankBlock& b = blocks[i];
      b.positions.ExpandInto(positions);
      const ops::LowRankBlockView view{.key_us = b.keys.us.View(),
                                       .key_vt = b.keys.vt.View(),
                                       .value_us = b.values.us.View(),
                                       .value_vt = b.values.vt.View(),
                                       .positions = positions,
                                       .value_ranks = b.value_ranks};
      Tensor w = weights_of(i);
      FZ_RETURN_IF_ERROR(ops::LowRankBlockAttend(
          {q.data<float>(), static_cast<size_t>(nh * d)}, view, attention_shape, b.rope, scale,
          {w.data<float>(), static_cast<size_t>(w.numel())}, part));
      std::copy(part.max.begin(), part.max.end(), part_max.data<float>() + i * nh);
      std::copy(part.sum.begin(), part.sum.end(), part_sum.data<float>() + i * nh);
      std::copy(part.out.begin(), part.out.end(), part_out.data<float>() + i * nh * d);
    }
  } else {
    // The fused decompress-and-attend kernel over the blocks' device copies, each writing its
    // rows of the stacked tensors.
    FZ_ASSIGN_OR_RETURN(const std::span<const DeviceLowRankBlock> copies,
                        seq.device_blocks.Sync(l, blocks, device_));
    for (int64_t i = 0; i < parts; ++i) {
      Tensor w = weights_of(i), m = row_of(part_max, i, {nh}), s = row_of(part_sum, i, {nh});
      Tensor o = row_of(part_out, i, {nh, d});
      FZ_RETURN_IF_ERROR(ops::LowRankBlockAttendCuda(q, copies[static_cast<size_t>(i)].view(),
                                                     attention_shape, blocks[i].rope, scale, w, m,
                                                     s, o));
    }
  }

  // The pages' share in attn merges with the blocks' in place; then each block token's
  // head-averaged probability in the merged softmax, which drives its value rank
  // (compress/attentionpack.h).
  FZ_ASSIGN_OR_RETURN(Tensor total_max, Empty({nh}));
  FZ_ASSIGN_OR_RETURN(Tensor total_sum, Empty({nh}));
  FZ_RETURN_IF_ERROR(ops::MergeAttentionParts(attn, pages_lse, part_max, part_sum, part_out, attn,
                                              total_max, total_sum));
  // They go to the step's statistics buffer, which comes to the host once the layers are done.
  FZ_ASSIGN_OR_RETURN(float* probs, StageFloats(seq, static_cast<size_t>(first.back())));
  LowRankStatisticsInFlight& pending = seq.low_rank_statistics;
  pending.layers.push_back({.layer = l,
                            .blocks = static_cast<size_t>(parts),
                            .offset = static_cast<size_t>(probs - pending.probs.data<float>())});
  for (int64_t i = 0; i < parts; ++i) {
    Tensor shares = Tensor::View(probs + first[i], {blocks[i].tokens()}, DType::kF32, device_);
    FZ_RETURN_IF_ERROR(ops::AttentionTokenShares(weights_of(i), row_of(part_max, i, {nh}),
                                                 total_max, total_sum, shares));
  }
  seq.prefill_stats.low_rank_attend_ms += MillisecondsSince(start);
  return absl::OkStatus();
}

StatusOr<float*> LowRankKv::StageFloats(Sequence& seq, size_t floats) const {
  LowRankStatisticsInFlight& pending = seq.low_rank_statistics;
  if (pending.probs.defined() &&
      pending.used + floats > static_cast<size_t>(pending.probs.numel())) {
    FZ_RETURN_IF_ERROR(SettleStatistics(seq));  // blocks added since the buffer was sized
  }
  if (!pending.probs.defined()) {
    // Sized for every layer's blocks as they are now: a step attends each layer once.
    size_t need = floats;
    for (int l = 0; l < seq.kv.num_layers(); ++l) {
      for (const kv::LowRankBlock& b : seq.kv.low_rank_blocks(l)) {
        need += static_cast<size_t>(b.tokens());
      }
    }
    FZ_ASSIGN_OR_RETURN(pending.probs, Empty({static_cast<int64_t>(need)}));
    pending.used = 0;
  }
  float* at = pending.probs.data<float>() + pending.used;
  pending.used += floats;
  return at;
}

Status LowRankKv::SettleStatistics(Sequence& seq) const {
  Sequence* const one[] = {&seq};
  return SettleStatistics(one);
}

Status LowRankKv::SettleStatistics(std::span<Sequence* const> seqs) const {
  // Every sequence's probabilities are queued to come down first; then one wait covers them all.
  struct Download {
    Sequence* seq = nullptr;
    StagingPool::Entry staging;
  };
  std::vector<Download> downloads;
  Status status = absl::OkStatus();
  for (Sequence* seq : seqs) {
    LowRankStatisticsInFlight& pending = seq->low_rank_statistics;
    if (pending.empty()) {
      pending.probs = Tensor();
      pending.used = 0;
      continue;
    }
    const size_t bytes = pending.used * sizeof(float);
    StatusOr<StagingPool::Entry> staging = staging_.Take(bytes);
    if (!staging.ok()) {
      status = staging.status();
      break;
    }
    status = DownloadAsync(staging->memory.get(), pending.probs.data<float>(), device_, bytes);
    downloads.push_back({.seq = seq, .staging = *std::move(staging)});
    if (!status.ok()) break;
  }
  if (status.ok() && !downloads.empty()) {
    StatusOr<std::shared_ptr<void>> fence = RecordStepFence(device_);
    status = fence.ok() ? WaitStepFence(device_, *fence) : fence.status();
  }
  for (Download& d : downloads) {
    LowRankStatisticsInFlight& pending = d.seq->low_rank_statistics;
    if (status.ok()) {
      const float* host = static_cast<const float*>(d.staging.memory.get());
      for (const LowRankStatisticsInFlight::Layer& layer : pending.layers) {
        std::vector<kv::LowRankBlock>& blocks = d.seq->kv.mutable_low_rank_blocks(layer.layer);
        const float* probs = host + layer.offset;
        for (size_t i = 0; i < layer.blocks && i < blocks.size(); ++i) {
          kv::LowRankBlock& b = blocks[i];
          const size_t tokens = static_cast<size_t>(b.tokens());
          d.seq->policy->OnLowRankAttention(layer.layer, std::span(probs, tokens),
                                            {.importance = b.importance,
                                             .value_ranks = b.value_ranks,
                                             .full_rank = b.values.rank,
                                             .decode_steps = &b.decode_steps});
          probs += tokens;
        }
      }
    }
    // On a failure the step's statistics are dropped: the blocks keep their last ranks.
    pending.layers.clear();
    pending.probs = Tensor();
    pending.used = 0;
    // Back with a fence after its copy (passed already when the wait above succeeded).
    staging_.GiveAfterQueuedWork(std::move(d.staging));
  }
  return status;
}

StatusOr<Tensor> LowRankKv::Empty(Shape shape) const {
  return Tensor::Empty(std::move(shape), DType::kF32, device_);
}

}  // namespace framezip::engine::llm
