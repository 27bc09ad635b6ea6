// LowRankBlock: AttentionPack's storage of one layer's visual tokens (docs/methods.md §2) — their
// pre-RoPE keys and their values, each as rank-R factors U·S [T, R] and Vᵀ [R, HD] in f16 or int4
// (kv/low_rank_factor.h), plus what decode needs to read them: positions (to rotate the rebuilt
// keys; runs of consecutive positions), the rank each token's value is read at, and the
// attention-importance EMA that chooses those ranks.
//
// A block is written once (after a prefill chunk's attention) and lives beside the layer's pages
// in kv::SequenceKv; only its ranks and importance change during decode. Host memory only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/kv/low_rank_factor.h"
#include "engine/kv/position_runs.h"
#include "engine/ops/low_rank.h"
#include "engine/ops/rope.h"

namespace framezip::engine::kv {

// Rank-R factors of a [rows, cols] matrix: M ≈ us · vt.
struct LowRankMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int rank = 0;
  LowRankFactor us;  // [rows, rank]
  LowRankFactor vt;  // [rank, cols]

  // Rounds f32 factors to `format`.
  static LowRankMatrix FromFactors(const ops::LowRankFactors& f, FactorFormat format);
  FactorFormat format() const { return us.format(); }
  // The f32 factors into a caller's buffer (resized), so a decode step reuses its memory.
  void UsF32(std::vector<float>& out) const { us.DecodeInto(out); }
  void VtF32(std::vector<float>& out) const { vt.DecodeInto(out); }
  size_t bytes() const { return us.bytes() + vt.bytes(); }
};

struct LowRankBlock {
  PositionRuns positions;             // [T] token positions, ascending
  LowRankMatrix keys;                 // pre-RoPE keys, [T, G·d]
  LowRankMatrix values;               // values, [T, G·d]
  std::vector<uint16_t> value_ranks;  // [T] rank each value is read at (<= values.rank)
  std::vector<float> importance;      // [T] EMA of the head-averaged attention each token got
  uint32_t decode_steps = 0;          // steps attended since made or restored (not stored)
  // Set by SequenceKv::AppendLowRankBlock, unique in the process: the page codec sends a block's
  // factors once and later refers to it by this (not stored).
  uint64_t serial = 0;
  ops::RopeParams rope;  // the model's RoPE, to rotate rebuilt keys
  int num_kv_heads = 0;  // G (cols = G·d)

  int64_t tokens() const { return positions.size(); }
  // Bytes the block holds: factors, positions, ranks and importance.
  size_t bytes() const;
  // Every token rebuilt: keys rotated to post-RoPE at their positions, values at their ranks
  // (what a dense cache would have held, up to the factorisation), [T, G·d] each.
  Status Reconstruct(float* k, float* v) const;
};

// Keys [n, G, d] post-RoPE at `positions` back to pre-RoPE (RoPE is a rotation: the inverse turns
// by the same angles backwards), in place.
void UnrotateKeys(float* k, int64_t n, int num_kv_heads, int head_dim,
                  std::span<const int32_t> positions, const ops::RopeParams& rope);

struct LowRankBlockOptions {
  int rank_k = 0;  // clamped to [1, min(n, G·d)]
  int rank_v = 0;
  FactorFormat factors = FactorFormat::kF16;
  uint64_t seed = 0;
};

// The block of n tokens from their post-RoPE keys and values [n, G·d]: keys un-rotated, both
// factorised (ops::RandomizedSvd) and rounded to options.factors, every value read at full rank
// until decode sets ranks. Positions must be ascending (INVALID_ARGUMENT otherwise).
StatusOr<LowRankBlock> MakeLowRankBlock(std::span<const float> k_post_rope,
                                        std::span<const float> v,
                                        std::span<const int32_t> positions, int num_kv_heads,
                                        int head_dim, const ops::RopeParams& rope,
                                        const LowRankBlockOptions& options);

}  // namespace framezip::engine::kv
