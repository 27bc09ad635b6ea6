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
// Options: AttentionPackOptions (policy_config.h), e.g. "attentionpack:rank_v=8,factors=int4"
// (int4: U·S and Vᵀ in 4 bits with a scale per column and 32 rows, kv/low_rank_factor.h).
#pragma once

#include <cstdint>
#include <memory>

#include "engine/compress/policy.h"

namespace framezip::engine::compress {

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

}  // namespace framezip::engine::compress
