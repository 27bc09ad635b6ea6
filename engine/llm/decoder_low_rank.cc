// AttentionPack's two places in the decoder (compress/attentionpack.h): a prefill chunk's visual
// rows becoming a low-rank block, and decode attention over pages plus blocks in one softmax,
// reading the blocks through ops/low_rank.h (keys rebuilt a tile at a time, values never).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/kv/low_rank_block.h"
#include "engine/llm/decoder.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/low_rank.h"

namespace framezip::engine::llm {
namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

Status Decoder::StoreLowRankBlock(int l, Sequence& seq, std::span<const int32_t> positions,
                                  const compress::PrefillLayerPlan& plan, const Tensor& k,
                                  const Tensor& v) const {
  if (!device_.is_cpu()) {
    return UnimplementedError("low-rank KV blocks are built on the CPU only");
  }
  const auto start = std::chrono::steady_clock::now();
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

Status Decoder::StoreResidualLowRank(int l, Sequence& seq,
                                     const compress::LowRankSpec& spec) const {
  if (!device_.is_cpu()) {
    return UnimplementedError("low-rank KV blocks are built on the CPU only");
  }
  const auto start = std::chrono::steady_clock::now();
  const int64_t n = seq.kv.full_tokens(l), hd = shape_.kv_heads * shape_.head_dim;
  if (n == 0) return absl::OkStatus();
  std::vector<float> k(static_cast<size_t>(n * hd)), v(k.size());
  FZ_RETURN_IF_ERROR(seq.kv.GatherFull(l, k.data(), v.data()));
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
  // The block first (it is charged to the KV budget and may not fit: then the pages stay and
  // nothing is lost), then the window's pages go.
  FZ_RETURN_IF_ERROR(seq.kv.AppendLowRankBlock(l, std::move(block)));
  FZ_RETURN_IF_ERROR(seq.kv.DropResidual(l));
  seq.prefill_stats.low_rank_build_ms += MillisecondsSince(start);
  return absl::OkStatus();
}

Status Decoder::AttendDecodeLowRank(int l, Sequence& seq, bool stored, const float* q,
                                    const float* k, const float* v, float* out) const {
  const int nh = static_cast<int>(shape_.heads), g = static_cast<int>(shape_.kv_heads);
  const int d = static_cast<int>(shape_.head_dim), per_group = nh / g;
  const int64_t hd = static_cast<int64_t>(g) * d;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const auto start = std::chrono::steady_clock::now();
  std::vector<kv::LowRankBlock>& blocks = seq.kv.mutable_low_rank_blocks(l);

  // The dense part: the pages, plus this step's row when it is not stored.
  const int64_t pages = seq.kv.page_tokens(l), dense = pages + (stored ? 0 : 1);
  std::vector<float> dk(static_cast<size_t>(dense * hd)), dv(dk.size());
  FZ_RETURN_IF_ERROR(seq.kv.GatherPages(l, dk.data(), dv.data()));
  if (!stored) {
    std::copy_n(k, hd, dk.data() + pages * hd);
    std::copy_n(v, hd, dv.data() + pages * hd);
  }
  int64_t total = dense;
  for (const kv::LowRankBlock& b : blocks) total += b.tokens();

  // Scores [nh, total]: dense keys first, then each block's.
  thread_local std::vector<float> scores;
  scores.assign(static_cast<size_t>(nh * total), 0.f);
  for (int h = 0; h < nh; ++h) {
    const float* qh = q + h * d;
    const int64_t col = static_cast<int64_t>(h / per_group) * d;
    for (int64_t j = 0; j < dense; ++j) {
      const float s = ops::cpu::Dot(qh, dk.data() + j * hd + col, d);
      scores[static_cast<size_t>(h * total + j)] = s * scale;
    }
  }
  // Per-thread scratch reused across steps: a decode step converts the factors to f32 once per
  // layer, and fresh multi-megabyte buffers would page-fault every time.
  thread_local std::vector<float> block_scores, us_f32, vt_f32;
  thread_local std::vector<uint16_t> key_ranks;
  thread_local std::vector<int32_t> positions;
  int64_t at = dense;
  for (const kv::LowRankBlock& b : blocks) {
    const int64_t t = b.tokens();
    block_scores.resize(static_cast<size_t>(nh * t));
    key_ranks.assign(static_cast<size_t>(t), static_cast<uint16_t>(b.keys.rank));
    b.positions.ExpandInto(positions);
    b.keys.UsF32(us_f32);
    b.keys.VtF32(vt_f32);
    FZ_RETURN_IF_ERROR(ops::LowRankKeyScores(
        {q, static_cast<size_t>(nh * d)}, us_f32, vt_f32, key_ranks, positions,
        {.num_heads = nh, .num_kv_heads = g, .head_dim = d, .rank = b.keys.rank}, b.rope, scale,
        block_scores));
    for (int h = 0; h < nh; ++h) {
      std::copy_n(block_scores.data() + h * t, t, scores.data() + h * total + at);
    }
    at += t;
  }

  // One softmax per head over everything the token sees.
  for (int h = 0; h < nh; ++h) {
    float* row = scores.data() + h * total;
    const float m = ops::cpu::Max(row, total);
    const float sum = ops::cpu::ExpShiftSum(row, total, m);
    ops::cpu::Scale(1.f / sum, total, row);
  }

  // out = P_dense · V_dense + Σ_blocks P_block · (U·S)·Vᵀ at each token's rank.
  std::fill_n(out, nh * d, 0.f);
  for (int h = 0; h < nh; ++h) {
    const float* p = scores.data() + h * total;
    const int64_t col = static_cast<int64_t>(h / per_group) * d;
    float* o = out + h * d;
    for (int64_t j = 0; j < dense; ++j) ops::cpu::Axpy(p[j], dv.data() + j * hd + col, d, o);
  }
  at = dense;
  thread_local std::vector<float> block_probs, mean_probs;
  for (kv::LowRankBlock& b : blocks) {
    const int64_t t = b.tokens();
    block_probs.resize(static_cast<size_t>(nh * t));
    mean_probs.assign(static_cast<size_t>(t), 0.f);
    for (int h = 0; h < nh; ++h) {
      const float* p = scores.data() + h * total + at;
      std::copy_n(p, t, block_probs.data() + h * t);
      for (int64_t j = 0; j < t; ++j) mean_probs[static_cast<size_t>(j)] += p[j] / nh;
    }
    b.values.UsF32(us_f32);
    b.values.VtF32(vt_f32);
    FZ_RETURN_IF_ERROR(ops::LowRankValueAttend(
        block_probs, us_f32, vt_f32, b.value_ranks,
        {.num_heads = nh, .num_kv_heads = g, .head_dim = d, .rank = b.values.rank},
        {out, static_cast<size_t>(nh * d)}));
    seq.policy->OnLowRankAttention(l, mean_probs, b.importance, b.value_ranks, b.values.rank);
    at += t;
  }
  seq.prefill_stats.low_rank_attend_ms += MillisecondsSince(start);
  return absl::OkStatus();
}

}  // namespace framezip::engine::llm
