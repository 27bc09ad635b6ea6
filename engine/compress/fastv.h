// FastV baseline (docs/methods.md §4.3), KV-cache variant: at layer K-1 the last token's attention,
// averaged over query heads, scores the visual tokens; the round(N_img·(1-R)) best are kept and
// the others are pruned from layer K on: not stored (kv::kDrop), not attended (sparse prefill
// over the kept tokens, their own attention rows skipped). Their hidden rows still go through
// the linear layers and the MLP (dense), which is wasted but harmless work: nothing reads them.
// Layers < K and every text token are untouched; decode sees the same reduced image set.
//
// Chunked prefill: the decision is made per chunk, scored by the chunk's last token over the
// chunk's own keys; chunks without visual tokens are untouched.
//
// Options: FastVOptions (policy_config.h): k, the first pruned layer; r, the pruned fraction.
#pragma once

#include <memory>

#include "engine/compress/policy.h"

namespace framezip::engine::compress {

class FastVPolicy final : public CompressionPolicy {
 public:
  explicit FastVPolicy(FastVOptions options) : options_(options) {}

  std::string_view name() const override { return "fastv"; }
  Status OnPrefillLayer(const PrefillLayerInputs& inputs, std::vector<uint8_t>& keep) override;
  Status PlanPrefillLayer(const PrefillLayerInputs& inputs, PrefillLayerPlan& plan) override;
  bool OnDecodeWrite(int, int32_t) override { return true; }
  bool StoresEveryDecodeToken() const override { return true; }
  // On any device: it reads q and k at layer K-1 only, copying the last query row and the keys to
  // the host there when they are on a GPU (every other layer reads nothing).
  bool RunsOn(Device) const override { return true; }

 private:
  FastVOptions options_;
  // Chunk-local indices of the visual tokens pruned in the current chunk (decided at layer K-1).
  std::vector<uint8_t> pruned_;
};

}  // namespace framezip::engine::compress
