#include "engine/kv/low_rank_block.h"

#include <algorithm>
#include <cmath>

#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::kv {
namespace {

// rows of us[:, :rank_t] · vt[:rank_t, :] into out [rows, cols].
void Rebuild(const std::vector<float>& us, const std::vector<float>& vt, int64_t rows,
             int64_t cols, int rank, std::span<const uint16_t> ranks, float* out) {
  for (int64_t t = 0; t < rows; ++t) {
    float* o = out + t * cols;
    std::fill_n(o, cols, 0.f);
    const int r_t = ranks.empty() ? rank : int{ranks[static_cast<size_t>(t)]};
    for (int r = 0; r < r_t; ++r) {
      const float u = us[static_cast<size_t>(t * rank + r)];
      const float* row = vt.data() + static_cast<int64_t>(r) * cols;
      for (int64_t c = 0; c < cols; ++c) o[c] += u * row[c];
    }
  }
}

}  // namespace

LowRankMatrix LowRankMatrix::FromFactors(const ops::LowRankFactors& f, FactorFormat format) {
  LowRankMatrix m;
  m.rows = f.rows;
  m.cols = f.cols;
  m.rank = f.rank;
  m.us = LowRankFactor::Encode(f.us, f.rows, f.rank, format);
  m.vt = LowRankFactor::Encode(f.vt, f.rank, f.cols, format);
  return m;
}

size_t LowRankBlock::bytes() const {
  return keys.bytes() + values.bytes() + positions.bytes() +
         value_ranks.size() * sizeof(uint16_t) + importance.size() * sizeof(float);
}

Status LowRankBlock::Reconstruct(float* k, float* v) const {
  const int64_t t = tokens(), cols = keys.cols;
  if (keys.rows != t || values.rows != t || values.cols != cols ||
      value_ranks.size() != static_cast<size_t>(t) || num_kv_heads <= 0 ||
      cols % num_kv_heads != 0) {
    return InternalError("low-rank block: inconsistent sizes ({} tokens, {}x{} keys, {}x{} values)",
                         t, keys.rows, keys.cols, values.rows, values.cols);
  }
  Rebuild(keys.us.Decode(), keys.vt.Decode(), t, cols, keys.rank, {}, k);
  const std::vector<int32_t> pos = positions.Expand();
  ops::RotateHalfSplitRows(k, t, num_kv_heads, cols / num_kv_heads, pos.data(), rope);
  Rebuild(values.us.Decode(), values.vt.Decode(), t, cols, values.rank, value_ranks, v);
  return absl::OkStatus();
}

void UnrotateKeys(float* k, int64_t n, int num_kv_heads, int head_dim,
                  std::span<const int32_t> positions, const ops::RopeParams& rope) {
  ops::RotateHalfSplitRows(k, n, num_kv_heads, head_dim, positions.data(), rope, -1.f);
}

StatusOr<LowRankBlock> MakeLowRankBlock(std::span<const float> k_post_rope,
                                        std::span<const float> v,
                                        std::span<const int32_t> positions, int num_kv_heads,
                                        int head_dim, const ops::RopeParams& rope,
                                        const LowRankBlockOptions& options) {
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t cols = static_cast<int64_t>(num_kv_heads) * head_dim;
  if (n == 0 || k_post_rope.size() != static_cast<size_t>(n * cols) ||
      v.size() != static_cast<size_t>(n * cols)) {
    return InvalidArgumentError("low-rank block: {} keys / {} values for {} tokens of {} channels",
                                k_post_rope.size(), v.size(), n, cols);
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t p = positions[static_cast<size_t>(i)];
    if (p < 0 || (i > 0 && p <= positions[static_cast<size_t>(i - 1)])) {
      return InvalidArgumentError("low-rank block: position {} at row {} is not ascending", p, i);
    }
  }
  const auto clamp_rank = [&](int r) {
    return static_cast<int>(std::clamp<int64_t>(r, 1, std::min(n, cols)));
  };
  std::vector<float> k_pre(k_post_rope.begin(), k_post_rope.end());
  UnrotateKeys(k_pre.data(), n, num_kv_heads, head_dim, positions, rope);
  FZ_ASSIGN_OR_RETURN(const ops::LowRankFactors kf,
                      ops::RandomizedSvd(k_pre, n, cols,
                                         {.rank = clamp_rank(options.rank_k), .seed = options.seed}));
  FZ_ASSIGN_OR_RETURN(const ops::LowRankFactors vf,
                      ops::RandomizedSvd(v, n, cols,
                                         {.rank = clamp_rank(options.rank_v),
                                          .seed = options.seed + 1}));
  LowRankBlock b;
  b.positions = PositionRuns::From(positions);
  b.keys = LowRankMatrix::FromFactors(kf, options.factors);
  b.values = LowRankMatrix::FromFactors(vf, options.factors);
  b.value_ranks.assign(static_cast<size_t>(n), static_cast<uint16_t>(b.values.rank));
  b.importance.assign(static_cast<size_t>(n), 0.f);
  b.rope = rope;
  b.num_kv_heads = num_kv_heads;
  return b;
}

}  // namespace framezip::engine::kv
