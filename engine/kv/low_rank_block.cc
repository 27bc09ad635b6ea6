#include "engine/kv/low_rank_block.h"

#include <algorithm>
#include <cmath>

#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::kv {
namespace {

void ToF32(const std::vector<Float16>& h, std::vector<float>& out) {
  out.resize(h.size());
  ops::cpu::ToF32(h.data(), DType::kF16, static_cast<int64_t>(h.size()), out.data());  // F16C
}

std::vector<float> ToF32(const std::vector<Float16>& h) {
  std::vector<float> out;
  ToF32(h, out);
  return out;
}

std::vector<Float16> ToF16(const std::vector<float>& f) {
  std::vector<Float16> out(f.size());
  for (size_t i = 0; i < f.size(); ++i) out[i] = F32ToF16(f[i]);
  return out;
}

// rows of us[:, :rank_t] · vt[:rank_t, :] into out [rows, cols].
void Rebuild(const std::vector<float>& us, const std::vector<float>& vt, int64_t rows,
             int64_t cols, int rank, std::span<const int32_t> ranks, float* out) {
  for (int64_t t = 0; t < rows; ++t) {
    float* o = out + t * cols;
    std::fill_n(o, cols, 0.f);
    const int r_t = ranks.empty() ? rank : ranks[static_cast<size_t>(t)];
    for (int r = 0; r < r_t; ++r) {
      const float u = us[static_cast<size_t>(t * rank + r)];
      const float* row = vt.data() + static_cast<int64_t>(r) * cols;
      for (int64_t c = 0; c < cols; ++c) o[c] += u * row[c];
    }
  }
}

}  // namespace

LowRankMatrix LowRankMatrix::FromFactors(const ops::LowRankFactors& f) {
  LowRankMatrix m;
  m.rows = f.rows;
  m.cols = f.cols;
  m.rank = f.rank;
  m.us = ToF16(f.us);
  m.vt = ToF16(f.vt);
  return m;
}

std::vector<float> LowRankMatrix::UsF32() const { return ToF32(us); }
std::vector<float> LowRankMatrix::VtF32() const { return ToF32(vt); }
void LowRankMatrix::UsF32(std::vector<float>& out) const { ToF32(us, out); }
void LowRankMatrix::VtF32(std::vector<float>& out) const { ToF32(vt, out); }

size_t LowRankBlock::bytes() const {
  return keys.bytes() + values.bytes() +
         positions.size() * (sizeof(int32_t) + sizeof(int32_t) + sizeof(float));
}

Status LowRankBlock::Reconstruct(float* k, float* v) const {
  const int64_t t = tokens(), cols = keys.cols;
  if (keys.rows != t || values.rows != t || values.cols != cols ||
      value_ranks.size() != static_cast<size_t>(t) || num_kv_heads <= 0 ||
      cols % num_kv_heads != 0) {
    return InternalError("low-rank block: inconsistent sizes ({} tokens, {}x{} keys, {}x{} values)",
                         t, keys.rows, keys.cols, values.rows, values.cols);
  }
  Rebuild(keys.UsF32(), keys.VtF32(), t, cols, keys.rank, {}, k);
  ops::RotateHalfSplitRows(k, t, num_kv_heads, cols / num_kv_heads, positions.data(), rope);
  Rebuild(values.UsF32(), values.VtF32(), t, cols, values.rank, value_ranks, v);
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
  b.positions.assign(positions.begin(), positions.end());
  b.keys = LowRankMatrix::FromFactors(kf);
  b.values = LowRankMatrix::FromFactors(vf);
  b.value_ranks.assign(static_cast<size_t>(n), b.values.rank);
  b.importance.assign(static_cast<size_t>(n), 0.f);
  b.rope = rope;
  b.num_kv_heads = num_kv_heads;
  return b;
}

}  // namespace framezip::engine::kv
