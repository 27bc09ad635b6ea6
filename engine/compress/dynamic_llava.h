// Dynamic-LLaVA (docs/methods.md §3): learned context sparsification.
//
// Prefill: layers < sparse_layer see every token. At the entry of sparse_layer the image
// predictor scores each block of visual rows (a contiguous run of visual rows in the chunk) from
// its hidden states; the top max(1, floor(n · vision_keep)) by keep score (logit 0 − logit 1, the
// order of log_softmax(logits)[0]) stay, in their original order, and the others are removed from
// the sequence for layers >= sparse_layer: no attention, no MLP, no KV there. Rows keep their
// original positions (RoPE). Text rows are never removed.
//
// Decode: at the entry of sparse_layer the output-text predictor decides for the new token
// (keep = logit 0 − logit 1 > text_threshold: 0, the paper's argmax, unless the predictors were
// calibrated to their keep rate); in layers >= sparse_layer the token attends to the cache and
// itself, and its K/V is stored only when kept. Layers < sparse_layer store every token.
//
// Chunked prefill: a video split by a chunk boundary is scored as two blocks (each part with its
// own top-k), which is what a chunk can see; the engine's default chunk (1024 rows) holds a
// 200-frame video of the shipped model whole.
//
// Options: DynamicLlavaOptions (policy_config.h), e.g.
// "dynamic_llava:vision_keep=0.5,text_gate=off". select=random ranks visual rows uniformly at
// random (the same count; the baseline a learned ranking must beat); text_keep in (0, 1] forces a
// keep rate instead of the text predictor (every token whose running count crosses a multiple of
// 1/text_keep is kept: exactly that fraction, deterministic, for testing gating before a predictor
// is trained on long answers); bits 4 or 2 store what is kept KIVI-style (int4/int2 pages, decode
// window of `window` tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/compress/dynamic_llava_predictors.h"
#include "engine/compress/policy.h"

namespace framezip::engine::compress {

class DynamicLlavaPolicy final : public CompressionPolicy {
 public:
  // `options` with every optional set (CreateDynamicLlavaPolicy fills them from the predictors).
  DynamicLlavaPolicy(DynamicLlavaOptions options,
                     std::shared_ptr<const DynamicLlavaPredictors> predictors);

  std::string_view name() const override { return "dynamic_llava"; }
  bool RunsOn(Device device) const override { return device == predictors_->device(); }
  kv::KvPrecision Precision(kv::KvFormat full) const override;
  Status OnPrefillLayer(const PrefillLayerInputs& inputs, std::vector<uint8_t>& keep) override;
  bool OnDecodeWrite(int layer, int32_t position) override;
  int ResidualWindow() const override { return options_.bits == 16 ? 0 : options_.window; }

  int RowSelectionLayer() const override { return *options_.sparse_layer; }
  Status SelectPrefillRows(const HiddenRowsInputs& inputs, std::vector<uint8_t>& keep) override;
  Status OnDecodeHidden(const Tensor& hidden, int32_t position) override;

  const DynamicLlavaOptions& options() const { return options_; }

 private:
  // Keep scores of the visual rows [r0, r1) of a chunk's hidden states, one per row.
  StatusOr<std::vector<float>> ScoreBlock(const Tensor& hidden, int64_t r0, int64_t r1);

  DynamicLlavaOptions options_;
  std::shared_ptr<const DynamicLlavaPredictors> predictors_;
  std::mt19937_64 rng_;
  bool decode_keep_ = true;  // the current decode token's decision
  int64_t decode_seen_ = 0;  // decode tokens decided so far (forced keep rate)
};

// FAILED_PRECONDITION without the model's predictors; the options left unset take the values
// the predictors were trained for.
StatusOr<std::unique_ptr<CompressionPolicy>> CreateDynamicLlavaPolicy(
    DynamicLlavaOptions options, const PolicyResources& resources);

}  // namespace framezip::engine::compress
