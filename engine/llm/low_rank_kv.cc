// LowRankKv (low_rank_kv.h): blocks built from a prefill chunk's rows and from the residual
// window, and decode attention over pages plus blocks in one softmax, reading the blocks through
// ops/low_rank.h (keys rebuilt a tile at a time, values never).
#include "engine/llm/low_rank_kv.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/kv/low_rank_block.h"
#include "engine/ops/cpu_kernels.h"
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

Status LowRankKv::AttendDecode(int l, Sequence& seq, bool stored, const float* q, const float* k,
                               const float* v, float* out) const {
  const int nh = static_cast<int>(shape_.heads), g = static_cast<int>(shape_.kv_heads);
  const int d = static_cast<int>(shape_.head_dim), per_group = nh / g;
  const int64_t hd = static_cast<int64_t>(g) * d;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const auto start = std::chrono::steady_clock::now();
  std::vector<kv::LowRankBlock>& blocks = seq.kv.mutable_low_rank_blocks(l);
  const bool on_host = device_.is_cpu();

  // On a GPU this step's rows come to the host, where the pages' share and the merge run, and
  // the output goes back at the end.
  thread_local std::vector<float> host_q, host_k, host_v, host_out;
  const float* const device_q = q;
  float* const device_out = out;
  if (!on_host) {
    FZ_RETURN_IF_ERROR(ToHostFloats(device_, q, nh * d, host_q));
    FZ_RETURN_IF_ERROR(ToHostFloats(device_, k, hd, host_k));
    FZ_RETURN_IF_ERROR(ToHostFloats(device_, v, hd, host_v));
    host_out.resize(static_cast<size_t>(nh * d));
    q = host_q.data();
    k = host_k.data();
    v = host_v.data();
    out = host_out.data();
  }

  // The dense part: the pages, plus this step's row when it is not stored. Its share is formed
  // as a block's is (ops::BlockAttention: maxima, sums, unnormalised outputs), so the parts merge
  // in one place below.
  const int64_t pages = seq.kv.page_tokens(l), dense = pages + (stored ? 0 : 1);
  thread_local std::vector<float> dk, dv, dense_p;
  dk.resize(static_cast<size_t>(dense * hd));
  dv.resize(dk.size());
  if (on_host) {
    FZ_RETURN_IF_ERROR(seq.kv.GatherPages(l, dk.data(), dv.data()));
  } else if (pages > 0) {
    FZ_ASSIGN_OR_RETURN(Tensor pk, Empty({pages, hd}));
    FZ_ASSIGN_OR_RETURN(Tensor pv, Empty({pages, hd}));
    FZ_RETURN_IF_ERROR(seq.kv.GatherPages(l, pk.data<float>(), pv.data<float>()));
    const size_t bytes = static_cast<size_t>(pages * hd) * sizeof(float);
    FZ_RETURN_IF_ERROR(CopyBytes(dk.data(), Device::Cpu(), pk.raw_data(), device_, bytes));
    FZ_RETURN_IF_ERROR(CopyBytes(dv.data(), Device::Cpu(), pv.raw_data(), device_, bytes));
  }
  if (!stored) {
    std::copy_n(k, hd, dk.data() + pages * hd);
    std::copy_n(v, hd, dv.data() + pages * hd);
  }
  ops::BlockAttention dense_part;
  dense_part.max.assign(static_cast<size_t>(nh), -std::numeric_limits<float>::infinity());
  dense_part.sum.assign(static_cast<size_t>(nh), 0.f);
  dense_part.out.assign(static_cast<size_t>(nh * d), 0.f);
  dense_p.resize(static_cast<size_t>(dense));
  for (int h = 0; h < nh && dense > 0; ++h) {
    const int64_t col = static_cast<int64_t>(h / per_group) * d;
    for (int64_t j = 0; j < dense; ++j) {
      dense_p[static_cast<size_t>(j)] =
          scale * ops::cpu::Dot(q + h * d, dk.data() + j * hd + col, d);
    }
    dense_part.max[h] = ops::cpu::Max(dense_p.data(), dense);
    dense_part.sum[h] = ops::cpu::ExpShiftSum(dense_p.data(), dense, dense_part.max[h]);
    for (int64_t j = 0; j < dense; ++j) {
      ops::cpu::Axpy(dense_p[static_cast<size_t>(j)], dv.data() + j * hd + col, d,
                     dense_part.out.data() + h * d);
    }
  }

  // Each block's share, and its tokens' e^(s − m_block) for the importance statistics.
  thread_local std::vector<ops::BlockAttention> parts;
  thread_local std::vector<std::vector<float>> weights;
  thread_local std::vector<int32_t> positions;
  parts.resize(blocks.size());
  weights.resize(blocks.size());
  const ops::LowRankAttentionShape attention_shape{
      .num_heads = nh, .num_kv_heads = g, .head_dim = d};
  if (on_host) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      const kv::LowRankBlock& b = blocks[i];
      b.positions.ExpandInto(positions);
      weights[i].resize(static_cast<size_t>(nh * b.tokens()));
      const ops::LowRankBlockView view{.key_us = b.keys.us.View(),
                                       .key_vt = b.keys.vt.View(),
                                       .value_us = b.values.us.View(),
                                       .value_vt = b.values.vt.View(),
                                       .positions = positions,
                                       .value_ranks = b.value_ranks};
      FZ_RETURN_IF_ERROR(ops::LowRankBlockAttend({q, static_cast<size_t>(nh * d)}, view,
                                                 attention_shape, b.rope, scale, weights[i],
                                                 parts[i]));
    }
  } else {
    FZ_RETURN_IF_ERROR(
        AttendBlocksOnDevice(seq, l, attention_shape, scale, device_q, parts, weights));
  }

  // Merge per head: out = Σ_parts e^(m_p − M)·out_p / Σ_parts e^(m_p − M)·sum_p.
  std::vector<float> total_max(static_cast<size_t>(nh)), total_sum(static_cast<size_t>(nh), 0.f);
  for (int h = 0; h < nh; ++h) {
    float m = dense_part.max[h];
    for (const ops::BlockAttention& p : parts) m = std::max(m, p.max[h]);
    total_max[h] = m;
    const auto add = [&](const ops::BlockAttention& p) {
      if (p.sum[h] == 0.f) return 0.f;
      const float f = std::exp(p.max[h] - m);
      total_sum[h] += f * p.sum[h];
      return f;
    };
    std::fill_n(out + h * d, d, 0.f);
    const float fd = add(dense_part);
    if (fd != 0.f) ops::cpu::Axpy(fd, dense_part.out.data() + h * d, d, out + h * d);
    for (const ops::BlockAttention& p : parts) {
      const float f = add(p);
      if (f != 0.f) ops::cpu::Axpy(f, p.out.data() + h * d, d, out + h * d);
    }
    ops::cpu::Scale(1.f / total_sum[h], d, out + h * d);
  }

  // Each block token's head-averaged probability, e^(s − M)/S averaged over the heads, drives its
  // value rank (compress/attentionpack.h).
  thread_local std::vector<float> mean_probs;
  for (size_t i = 0; i < blocks.size(); ++i) {
    kv::LowRankBlock& b = blocks[i];
    const int64_t t = b.tokens();
    mean_probs.assign(static_cast<size_t>(t), 0.f);
    for (int h = 0; h < nh; ++h) {
      const float f = std::exp(parts[i].max[h] - total_max[h]) / (total_sum[h] * nh);
      ops::cpu::Axpy(f, weights[i].data() + h * t, t, mean_probs.data());
    }
    seq.policy->OnLowRankAttention(l, mean_probs,
                                   {.importance = b.importance,
                                    .value_ranks = b.value_ranks,
                                    .full_rank = b.values.rank,
                                    .decode_steps = &b.decode_steps});
  }
  if (!on_host) {
    FZ_RETURN_IF_ERROR(CopyBytes(device_out, device_, out, Device::Cpu(),
                                 static_cast<size_t>(nh * d) * sizeof(float)));
  }
  seq.prefill_stats.low_rank_attend_ms += MillisecondsSince(start);
  return absl::OkStatus();
}

Status LowRankKv::AttendBlocksOnDevice(Sequence& seq, int l,
                                       const ops::LowRankAttentionShape& shape, float scale,
                                       const float* device_q,
                                       std::vector<ops::BlockAttention>& parts,
                                       std::vector<std::vector<float>>& weights) const {
  const std::vector<kv::LowRankBlock>& blocks = seq.kv.low_rank_blocks(l);
  const int64_t nh = shape.num_heads, d = shape.head_dim;
  FZ_ASSIGN_OR_RETURN(const std::span<const DeviceLowRankBlock> copies,
                      seq.device_blocks.Sync(l, blocks, device_));
  // This step's query row where the decoder left it (the kernel only reads it).
  const Tensor q = Tensor::View(const_cast<float*>(device_q), {nh, d}, DType::kF32, device_);
  FZ_ASSIGN_OR_RETURN(Tensor max, Empty({nh}));
  FZ_ASSIGN_OR_RETURN(Tensor sum, Empty({nh}));
  FZ_ASSIGN_OR_RETURN(Tensor out, Empty({nh, d}));
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int64_t t = blocks[i].tokens();
    FZ_ASSIGN_OR_RETURN(Tensor w, Empty({nh, t}));
    FZ_RETURN_IF_ERROR(ops::LowRankBlockAttendCuda(q, copies[i].view(), shape, blocks[i].rope,
                                                   scale, w, max, sum, out));
    // The policy's importance statistics and the merge read the parts on the host.
    FZ_RETURN_IF_ERROR(ToHostFloats(device_, w.data<float>(), nh * t, weights[i]));
    FZ_RETURN_IF_ERROR(ToHostFloats(device_, max.data<float>(), nh, parts[i].max));
    FZ_RETURN_IF_ERROR(ToHostFloats(device_, sum.data<float>(), nh, parts[i].sum));
    FZ_RETURN_IF_ERROR(ToHostFloats(device_, out.data<float>(), nh * d, parts[i].out));
  }
  return absl::OkStatus();
}

StatusOr<Tensor> LowRankKv::Empty(Shape shape) const {
  return Tensor::Empty(std::move(shape), DType::kF32, device_);
}

}  // namespace framezip::engine::llm
