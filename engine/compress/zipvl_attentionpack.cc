#include "engine/compress/zipvl_attentionpack.h"

#include <vector>

namespace framezip::engine::compress {

Status ZipVlAttentionPackPolicy::OnPrefillLayer(const PrefillLayerInputs& inputs,
                                                std::vector<uint8_t>& keep) {
  return zipvl_.OnPrefillLayer(inputs, keep);
}

Status ZipVlAttentionPackPolicy::PlanPrefillLayer(const PrefillLayerInputs& in,
                                                  PrefillLayerPlan& plan) {
  FZ_RETURN_IF_ERROR(zipvl_.PlanPrefillLayer(in, plan));
  if (in.visual == nullptr) return absl::OkStatus();
  std::vector<int32_t> rows;
  for (size_t i = 0; i < plan.classes.size(); ++i) {
    // kFull: a layer ZipVL leaves whole keeps every token important too.
    const bool important = plan.classes[i] == kv::kImportant || plan.classes[i] == kv::kFull;
    if (in.visual[i] && important) rows.push_back(static_cast<int32_t>(i));
  }
  pack_.PlanLowRankRows(in.layer, std::move(rows), plan);
  return absl::OkStatus();
}

}  // namespace framezip::engine::compress
