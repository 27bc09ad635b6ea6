// zipvl+attentionpack (docs/methods.md §2.4): ZipVL chooses, per layer and chunk, the important
// tokens (probe scores, adaptive top-p) and runs its sparse prefill; the important VISUAL tokens
// then leave the pages for an AttentionPack low-rank block, while the rest of the visual tokens
// take ZipVL's low-bit pages (or are evicted with low_bits=evict) and the text keeps ZipVL's
// classes. Decode reads pages and blocks in one softmax (llm/low_rank_kv.h); the blocks'
// value ranks follow the attention EMA, the residual window follows ZipVL.
//
// Options: ZipVlAttentionPackOptions (policy_config.h), every zipvl and attentionpack option
// ("zipvl+attentionpack:tau=0.9,rank_v=16,factors=int4"); `seed` and `dense_layers` are shared
// (dense layers attend densely in prefill and keep their tokens in pages). Runs on every device, as
// attentionpack.
#pragma once

#include <memory>

#include "engine/compress/attentionpack.h"
#include "engine/compress/policy.h"
#include "engine/compress/zipvl.h"

namespace framezip::engine::compress {

class ZipVlAttentionPackPolicy final : public CompressionPolicy {
 public:
  ZipVlAttentionPackPolicy(ZipVlOptions zipvl, AttentionPackOptions pack)
      : zipvl_(zipvl), pack_(pack) {}

  std::string_view name() const override { return "zipvl+attentionpack"; }
  kv::KvPrecision Precision(kv::KvFormat full) const override { return zipvl_.Precision(full); }
  Status OnPrefillLayer(const PrefillLayerInputs& inputs, std::vector<uint8_t>& keep) override;
  Status PlanPrefillLayer(const PrefillLayerInputs& inputs, PrefillLayerPlan& plan) override;
  bool OnDecodeWrite(int, int32_t) override { return true; }
  bool StoresEveryDecodeToken() const override { return true; }
  int ResidualWindow() const override { return zipvl_.ResidualWindow(); }
  bool RunsOn(Device device) const override { return zipvl_.RunsOn(device); }
  Status ClassifyResidual(int layer, const Tensor& q, const Tensor& k,
                          std::vector<uint8_t>& classes) override {
    return zipvl_.ClassifyResidual(layer, q, k, classes);
  }
  void OnLowRankAttention(int layer, std::span<const float> mean_probs,
                          const LowRankDecodeState& block) override {
    pack_.OnLowRankAttention(layer, mean_probs, block);
  }

 private:
  ZipVlPolicy zipvl_;
  AttentionPackPolicy pack_;
};

}  // namespace framezip::engine::compress
