#include "engine/compress/attentionpack.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>

namespace framezip::engine::compress {
namespace {

// Importances are EMAs of attention probabilities, >= 0, so their bit patterns order as the
// values do; anything else (NaN, a negative) counts as 0.
uint32_t OrderKey(float x) { return x > 0.f ? std::bit_cast<uint32_t>(x) : 0u; }

// The key of the top-th largest importance, and how many tokens holding exactly that key belong
// to the top (the others above it all do).
struct TopSplit {
  uint32_t threshold = 0;
  size_t ties = 0;
};

// Radix selection on the keys, 12 + 12 + 8 bits, most significant first: each pass counts the
// tokens that share the prefix found so far and picks the bucket holding the top-th one. Three
// linear passes instead of nth_element's data-dependent ones: this runs every decode step for
// every layer's block (8k tokens: ~90 µs with nth_element, the largest serial cost of a step).
TopSplit SelectTop(std::span<const float> importance, size_t top) {
  if (top == 0) return {.threshold = UINT32_MAX, .ties = 0};  // nothing reaches it
  struct Level {
    int shift, bits;
  };
  constexpr Level kLevels[] = {{20, 12}, {8, 12}, {0, 8}};
  std::array<uint32_t, 4096> histogram;
  uint32_t prefix = 0, mask = 0;
  size_t need = top;
  for (const Level& level : kLevels) {
    const uint32_t digits = (1u << level.bits) - 1u;
    histogram.fill(0);
    for (const float x : importance) {
      const uint32_t key = OrderKey(x);
      if ((key & mask) == prefix) ++histogram[(key >> level.shift) & digits];
    }
    uint32_t bucket = digits;
    while (bucket > 0 && histogram[bucket] < need) need -= histogram[bucket--];
    prefix |= bucket << level.shift;
    mask |= digits << level.shift;
  }
  return {.threshold = prefix, .ties = need};
}

}  // namespace

Status AttentionPackPolicy::OnPrefillLayer(const PrefillLayerInputs&, std::vector<uint8_t>&) {
  return absl::OkStatus();  // PlanPrefillLayer decides
}

Status AttentionPackPolicy::PlanPrefillLayer(const PrefillLayerInputs& in, PrefillLayerPlan& plan) {
  if (in.visual == nullptr) return absl::OkStatus();
  std::vector<int32_t> rows;
  for (int64_t i = 0; i < in.q->dim(0); ++i) {
    if (in.visual[i]) rows.push_back(static_cast<int32_t>(i));
  }
  PlanLowRankRows(in.layer, std::move(rows), plan);
  return absl::OkStatus();
}

void AttentionPackPolicy::PlanLowRankRows(int layer, std::vector<int32_t> rows,
                                          PrefillLayerPlan& plan) const {
  if (layer < options_.dense_layers || static_cast<int64_t>(rows.size()) < options_.min_tokens) {
    return;
  }
  for (const int32_t r : rows) plan.classes[static_cast<size_t>(r)] = kv::kDrop;
  plan.low_rank_rows = std::move(rows);
  plan.low_rank_k = options_.rank_k;
  plan.low_rank_v = options_.rank_v;
  plan.low_rank_factors = options_.factors;
  plan.low_rank_seed = options_.seed + 2 * static_cast<uint64_t>(layer);
}

std::optional<LowRankSpec> AttentionPackPolicy::ResidualLowRank(int layer) const {
  if (options_.recompress <= 0 || layer < options_.dense_layers) return std::nullopt;
  // Odd offsets: the prefill blocks of a layer use seed + 2·layer.
  return LowRankSpec{.rank_k = options_.rank_k,
                     .rank_v = options_.rank_v,
                     .factors = options_.factors,
                     .seed = options_.seed + 2 * static_cast<uint64_t>(layer) + 1};
}

void AttentionPackPolicy::OnLowRankAttention(int, std::span<const float> mean_probs,
                                             const LowRankDecodeState& block) {
  const size_t n = mean_probs.size();
  std::span<float> importance = block.importance;
  std::span<uint16_t> value_ranks = block.value_ranks;
  const int full_rank = block.full_rank;
  const float w = static_cast<float>(options_.ema);
  for (size_t t = 0; t < n; ++t) importance[t] = w * importance[t] + (1.f - w) * mean_probs[t];
  const uint32_t step = (*block.decode_steps)++;
  if (step % static_cast<uint32_t>(options_.regroup) != 0) return;
  if (options_.groups <= 1) {
    std::fill(value_ranks.begin(), value_ranks.end(), static_cast<uint16_t>(full_rank));
    return;
  }
  // The top fraction by importance at full rank, the rest at a quarter of it (F = 2 in
  // docs/methods.md §2.3).
  const size_t top =
      std::min(n, static_cast<size_t>(std::ceil(options_.top_fraction * static_cast<double>(n))));
  const auto full = static_cast<uint16_t>(full_rank);
  const auto low = static_cast<uint16_t>(std::max(1, full_rank / 4));
  const TopSplit split = SelectTop(importance, top);
  size_t ties_left = split.ties;
  for (size_t t = 0; t < n; ++t) {
    const uint32_t key = OrderKey(importance[t]);
    const bool take = key > split.threshold || (key == split.threshold && ties_left > 0);
    if (key == split.threshold && ties_left > 0) --ties_left;
    value_ranks[t] = take ? full : low;
  }
}

}  // namespace framezip::engine::compress
