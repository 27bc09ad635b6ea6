// AttentionPack (docs/methods.md §2): per request and layer, the visual tokens' keys (before RoPE)
// and values, all KV heads concatenated, are stored as low-rank factors (randomized SVD,
// kv/low_rank_block.h) instead of pages; decode reads them without rebuilding the block
// (ops/low_rank.h) and, for the values, at a rank chosen per token by the attention it gets:
// an EMA of its head-averaged probability; the top `top_fraction` at full rank, the rest at
// rank / 4 (keys stay at full rank: they are the more sensitive, §2.3). Text and generated
// tokens stay in pages at the engine's full precision.
//
// Compression happens per prefill chunk, on the chunk's visual rows, after the chunk's own
// (exact) attention; a later chunk or turn attends to a block rebuilt. Blocks smaller than
// `min_tokens` rows stay in pages. Blocks are host data on every device; a GPU decoder attends its
// device copies of them (llm/device_low_rank_block.h).
//
// Options ("attentionpack:key=value,..."): rank_k (8), rank_v (16) — of HD = G·d (64 for the
// shipped model: HD/8 and HD/4. The rank sweep in bench/RESULTS.md chose them: this model's
// pre-RoPE visual keys lose nothing down to rank 4, values need 8 or more; and a key rank is
// paid on every decode step, each key being rebuilt from rank_k products) —, groups (2:
// top_fraction at rank_v, the rest at rank_v/4; 1: every value at rank_v), top_fraction (0.25), ema
// (0.9, ω), regroup (16: decode steps between regroupings by the EMA, the first step included),
// dense_layers (0: layers below it keep every token in pages), min_tokens (32), seed (0), factors
// (f16 | int4: U·S and Vᵀ in 4 bits with a scale per column and 32 rows, kv/low_rank_factor.h),
// recompress (T_p, 0 = off: a layer's full-precision tokens — text and generated — become a block
// once there are this many).
#pragma once

#include <cstdint>
#include <memory>

#include "engine/compress/policy.h"
#include "engine/compress/policy_options.h"

namespace framezip::engine::compress {

struct AttentionPackOptions {
  int rank_k = 8;
  int rank_v = 16;
  int groups = 2;
  double top_fraction = 0.25;
  double ema = 0.9;
  // Decode steps between regroupings of a block's values by importance (the EMA itself moves
  // every step). The reference code groups once per compression; every step cost a selection over
  // every block token per layer, a fifth of a decode step at 8k tokens.
  int regroup = 16;
  int dense_layers = 0;
  int min_tokens = 32;
  uint64_t seed = 0;
  kv::FactorFormat factors = kv::FactorFormat::kF16;
  // T_p: once a layer holds this many full-precision tokens (text and generated ones), they
  // become one more low-rank block at rank_k / rank_v. 0 = never (the default: on the shipped
  // model's short conversations text is a small part of the cache, and the question's tokens are
  // the ones the next answer leans on hardest).
  int recompress = 0;
};

class AttentionPackPolicy final : public CompressionPolicy {
 public:
  explicit AttentionPackPolicy(AttentionPackOptions options) : options_(options) {}

  std::string_view name() const override { return "attentionpack"; }
  // Its plan reads the visual mask and the chunk's length, never the activations: a GPU decoder
  // need not copy them to the host for it.
  bool RunsOn(Device) const override { return true; }
  Status OnPrefillLayer(const PrefillLayerInputs& inputs, std::vector<uint8_t>& keep) override;
  Status PlanPrefillLayer(const PrefillLayerInputs& inputs, PrefillLayerPlan& plan) override;
  bool OnDecodeWrite(int, int32_t) override { return true; }
  bool StoresEveryDecodeToken() const override { return true; }
  int ResidualWindow() const override { return options_.recompress; }
  std::optional<LowRankSpec> ResidualLowRank(int layer) const override;
  void OnLowRankAttention(int layer, std::span<const float> mean_probs,
                          const LowRankDecodeState& block) override;

  const AttentionPackOptions& options() const { return options_; }

  // Plans chunk-local `rows` (ascending) of `layer` as one low-rank block: their classes become
  // kDrop and the plan carries the ranks, format and seed — unless the layer is dense or there are
  // fewer than min_tokens rows, when the plan is left as it is.
  void PlanLowRankRows(int layer, std::vector<int32_t> rows, PrefillLayerPlan& plan) const;

 private:
  AttentionPackOptions options_;
};

// Reads the attentionpack keys of `options` (the caller checks there are no others).
StatusOr<AttentionPackOptions> ParseAttentionPackOptions(PolicyOptions& options);
StatusOr<std::unique_ptr<CompressionPolicy>> CreateAttentionPackPolicy(PolicyOptions& options);

}  // namespace framezip::engine::compress
