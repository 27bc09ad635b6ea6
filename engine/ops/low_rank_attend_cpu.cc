// LowRankBlockAttend on the CPU (contract in low_rank.h): flash-decoding over chunks of the
// block's tokens, one ComputePool task per chunk. A task widens only its chunk's factor rows,
// scores its keys 16 tokens at a time, one per vector lane (cpu::LowRankScoreLanes),
// exponentiates against the chunk's own maxima and sums U·S rows into a [H, R_v] partial; the
// partials are then merged by their maxima and multiplied by Vᵀ once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/low_rank.h"
#include "engine/ops/low_rank_checks.h"
#include "engine/ops/rope_table.h"

namespace framezip::engine::ops {
namespace {

// Tokens per task: 16 key tiles of cpu::kLowRankLanes. The partial a chunk leaves
// (H·(R_v + 2) floats) is small beside the work, and 256 rows of int4 factors widen in a few
// microseconds.
constexpr int64_t kChunk = 256;
constexpr int64_t kKeyTile = cpu::kLowRankLanes;

Status CheckSize(std::string_view name, size_t size, int64_t want) {
  if (static_cast<int64_t>(size) != want) {
    return InvalidArgumentError("LowRankBlockAttend: {} has {} elements, want {}", name, size,
                                want);
  }
  return absl::OkStatus();
}

Status CheckArguments(std::span<const float> q, const LowRankBlockView& b,
                      const LowRankAttentionShape& s, const RopeParams& rope,
                      std::span<const float> weights) {
  FZ_RETURN_IF_ERROR(CheckLowRankBlockShape("LowRankBlockAttend", b, s, rope));
  const int64_t tokens = static_cast<int64_t>(b.positions.size());
  const int64_t rank_v = b.value_us.cols;
  FZ_RETURN_IF_ERROR(CheckSize("q", q.size(), int64_t{s.num_heads} * s.head_dim));
  FZ_RETURN_IF_ERROR(CheckSize("weights", weights.size(), int64_t{s.num_heads} * tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    if (b.positions[t] < 0) {
      return InvalidArgumentError("LowRankBlockAttend: positions[{}] is {}", t, b.positions[t]);
    }
    if (b.value_ranks[t] > rank_v) {
      return InvalidArgumentError("LowRankBlockAttend: value_ranks[{}] is {}, outside [0, {}]", t,
                                  b.value_ranks[t], rank_v);
    }
  }
  return absl::OkStatus();
}

// RoPE angles of a tile of W = cpu::kLowRankLanes tokens in the lane layout of
// cpu::LowRankScoreLanes: cos/sin[c·W + l] for pair c and the tile's token l.
//
// A tile of consecutive positions p0 + l turns its base angle p0·θ_c by l·θ_c (tables computed
// once per call, in double), and the base follows the previous tile's by W·θ_c (angle addition),
// so a run of tokens costs 4 products per pair and token instead of a sin and a cos. The base is
// taken afresh — the f32 angle float(p0)·θ_c of ApplyRope, from the shared RopeTable when it holds
// the position — at every chunk's first tile and after any gap; a tile with a gap inside takes
// every lane afresh. The turned angles drift from the f32
// products by at most a few tens of ulps over a chunk's 16 tiles.
class LaneAngles {
 public:
  explicit LaneAngles(std::vector<float> inv_freq) : inv_freq_(std::move(inv_freq)) {
    const int64_t half = static_cast<int64_t>(inv_freq_.size());
    lane_cos_.resize(static_cast<size_t>(half * W));
    lane_sin_.resize(lane_cos_.size());
    for (int64_t c = 0; c < half; ++c) {
      for (int64_t l = 0; l < W; ++l) {
        lane_cos_[c * W + l] = static_cast<float>(std::cos(static_cast<double>(l) * inv_freq_[c]));
        lane_sin_[c * W + l] = static_cast<float>(std::sin(static_cast<double>(l) * inv_freq_[c]));
      }
      step_cos_.push_back(static_cast<float>(std::cos(static_cast<double>(W) * inv_freq_[c])));
      step_sin_.push_back(static_cast<float>(std::sin(static_cast<double>(W) * inv_freq_[c])));
    }
  }

  // A tile's base angle, carried to the next tile (valid = false: take the next one afresh).
  struct Base {
    bool valid = false;
    int32_t position = 0;
    std::vector<float> cos, sin;
  };

  // The angles of positions[0, n) (n <= W) into cos/sin [half, W]; `table` (may be null) holds
  // the exact angles of the positions below its size.
  void Fill(const int32_t* positions, int64_t n, Base& base, const RopeTable* table, float* cos,
            float* sin) const {
    const int64_t half = static_cast<int64_t>(inv_freq_.size());
    const auto exact = [&](int32_t p, int64_t c, float& co, float& si) {
      if (table != nullptr && p < table->positions()) {
        co = table->cos(p)[c];
        si = table->sin(p)[c];
        return;
      }
      const float f = static_cast<float>(p) * inv_freq_[c];
      co = static_cast<float>(std::cos(static_cast<double>(f)));
      si = static_cast<float>(std::sin(static_cast<double>(f)));
    };
    bool run = true;
    // In 64 bits: a restored block's positions are checked as >= 0 only.
    for (int64_t l = 1; l < n; ++l) run = run && positions[l] == int64_t{positions[0]} + l;
    if (!run) {
      for (int64_t c = 0; c < half; ++c) {
        for (int64_t l = 0; l < W; ++l) {
          // Lanes past n: finite, unused.
          exact(positions[std::min(l, n - 1)], c, cos[c * W + l], sin[c * W + l]);
        }
      }
      base.valid = false;
      return;
    }
    base.cos.resize(static_cast<size_t>(half));
    base.sin.resize(static_cast<size_t>(half));
    if (base.valid && positions[0] == int64_t{base.position} + W) {
      for (int64_t c = 0; c < half; ++c) {
        const float bc = base.cos[c], bs = base.sin[c];
        base.cos[c] = bc * step_cos_[c] - bs * step_sin_[c];
        base.sin[c] = bs * step_cos_[c] + bc * step_sin_[c];
      }
    } else {
      for (int64_t c = 0; c < half; ++c) exact(positions[0], c, base.cos[c], base.sin[c]);
    }
    base.valid = true;
    base.position = positions[0];
    cpu::TurnLanes(base.cos.data(), base.sin.data(), lane_cos_.data(), lane_sin_.data(), half, cos,
                   sin);
  }

 private:
  static constexpr int64_t W = cpu::kLowRankLanes;
  std::vector<float> inv_freq_, lane_cos_, lane_sin_, step_cos_, step_sin_;
};

// The tables depend only on the model's RoPE (its inverse frequencies): built once per thread
// instead of 2·(W + 1)·d/2 sines and cosines per layer and step.
const LaneAngles& LaneAnglesFor(const RopeParams& rope) {
  thread_local std::vector<float> built_for;
  thread_local std::unique_ptr<LaneAngles> angles;
  std::vector<float> inv_freq = RopeInverseFrequencies(rope);
  if (angles == nullptr || inv_freq != built_for) {
    built_for = inv_freq;
    angles = std::make_unique<LaneAngles>(std::move(inv_freq));
  }
  return *angles;
}

// Rows [0, n) of U·S [n, R] (row-major) into the lane layout ut [R, W], lanes past n zero.
void ToLanes(const float* us, int64_t n, int64_t rank, float* ut) {
  constexpr int64_t W = cpu::kLowRankLanes;
  std::fill(ut, ut + rank * W, 0.f);
  for (int64_t l = 0; l < n; ++l) {
    for (int64_t j = 0; j < rank; ++j) ut[j * W + l] = us[l * rank + j];
  }
}

// What one chunk leaves for the merge: per head its maximum, its sum and z = Σ_t w·us_v[t].
struct ChunkPartials {
  int64_t heads = 0, rank_v = 0;
  std::vector<float> max, sum, z;  // [chunks, H], [chunks, H], [chunks, H, R_v]

  ChunkPartials(int64_t chunks, int64_t h, int64_t r)
      : heads(h), rank_v(r), max(chunks * h), sum(chunks * h), z(chunks * h * r, 0.f) {}
};

}  // namespace

Status LowRankBlockAttend(std::span<const float> q, const LowRankBlockView& block,
                          const LowRankAttentionShape& shape, const RopeParams& rope, float scale,
                          std::span<float> weights, BlockAttention& result) {
  FZ_RETURN_IF_ERROR(CheckArguments(q, block, shape, rope, weights));
  const int64_t tokens = static_cast<int64_t>(block.positions.size());
  const int64_t heads = shape.num_heads, d = shape.head_dim, kv_heads = shape.num_kv_heads;
  const int64_t hd = kv_heads * d, half = d / 2, group = heads / kv_heads;
  const int64_t rank_k = block.key_us.cols, rank_v = block.value_us.cols;
  if (scale == 0) scale = 1.f / std::sqrt(static_cast<float>(d));
  result.max.assign(static_cast<size_t>(heads), -std::numeric_limits<float>::infinity());
  result.sum.assign(static_cast<size_t>(heads), 0.f);
  result.out.assign(static_cast<size_t>(heads * d), 0.f);
  if (tokens == 0) return absl::OkStatus();

  // The two Vᵀ are small (R × HD): widened once per call.
  std::vector<float> vt_k(static_cast<size_t>(rank_k * hd)), vt_v(static_cast<size_t>(rank_v * hd));
  block.key_vt.DecodeRows(0, rank_k, vt_k.data());
  block.value_vt.DecodeRows(0, rank_v, vt_v.data());
  const LaneAngles& angles = LaneAnglesFor(rope);
  const int32_t last = *std::max_element(block.positions.begin(), block.positions.end());
  const std::shared_ptr<const RopeTable> table = RopeTable::For(rope, int64_t{last} + 1);

  const int64_t chunks = (tokens + kChunk - 1) / kChunk;
  ChunkPartials partials(chunks, heads, rank_v);
  ComputePool().ParallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
    thread_local std::vector<float> us_k, us_v, ut, cos, sin;
    thread_local LaneAngles::Base base;
    us_k.resize(static_cast<size_t>(kChunk * rank_k));
    us_v.resize(static_cast<size_t>(kChunk * rank_v));
    ut.resize(static_cast<size_t>(kKeyTile * rank_k));
    cos.resize(static_cast<size_t>(kKeyTile * half));
    sin.resize(static_cast<size_t>(kKeyTile * half));
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t t0 = c * kChunk, n = std::min(kChunk, tokens - t0);
      float* w = weights.data() + t0;  // w[h·tokens + i] for the chunk's token i
      block.key_us.DecodeRows(t0, n, us_k.data());
      base.valid = false;  // each chunk takes its first angles afresh
      for (int64_t i0 = 0; i0 < n; i0 += kKeyTile) {
        const int64_t m = std::min(kKeyTile, n - i0);
        angles.Fill(block.positions.data() + t0 + i0, m, base, table.get(), cos.data(), sin.data());
        ToLanes(us_k.data() + i0 * rank_k, m, rank_k, ut.data());
        // Scores land at w[h·tokens + i0 + l].
        cpu::LowRankScoreLanes(ut.data(), vt_k.data(), rank_k, kv_heads, d, heads, q.data(), scale,
                               cos.data(), sin.data(), w + i0, tokens, m);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* row = w + h * tokens;
        const float mx = cpu::Max(row, n);
        partials.max[c * heads + h] = mx;
        partials.sum[c * heads + h] = cpu::ExpShiftSum(row, n, mx);
      }
      block.value_us.DecodeRows(t0, n, us_v.data());
      cpu::WeightedRowsSum(w, tokens, heads, us_v.data(), rank_v, block.value_ranks.data() + t0, n,
                           partials.z.data() + c * heads * rank_v);
    }
  });

  // Merge the chunks per head by their maxima; the weights follow to the block's maximum.
  std::vector<float> z(static_cast<size_t>(rank_v));
  for (int64_t h = 0; h < heads; ++h) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < chunks; ++c) mx = std::max(mx, partials.max[c * heads + h]);
    std::fill(z.begin(), z.end(), 0.f);
    float sum = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const float f = std::exp(partials.max[c * heads + h] - mx);
      sum += f * partials.sum[c * heads + h];
      cpu::Axpy(f, partials.z.data() + (c * heads + h) * rank_v, rank_v, z.data());
      if (f != 1.f) {
        const int64_t t0 = c * kChunk;
        cpu::Scale(f, std::min(kChunk, tokens - t0), weights.data() + h * tokens + t0);
      }
    }
    result.max[h] = mx;
    result.sum[h] = sum;
    // out_h = z · Vᵀ[:, slice of h]: the rank mask is already in z.
    float* out = result.out.data() + h * d;
    const float* vt = vt_v.data() + (h / group) * d;
    for (int64_t j = 0; j < rank_v; ++j) cpu::Axpy(z[j], vt + j * hd, d, out);
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
