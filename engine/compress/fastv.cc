#include "engine/compress/fastv.h"

#include <algorithm>
#include <cmath>

#include "engine/compress/top_p.h"

namespace framezip::engine::compress {

Status FastVPolicy::OnPrefillLayer(const PrefillLayerInputs& inputs, std::vector<uint8_t>& keep) {
  PrefillLayerPlan plan;
  plan.classes = std::move(keep);
  FZ_RETURN_IF_ERROR(PlanPrefillLayer(inputs, plan));
  keep = std::move(plan.classes);
  return absl::OkStatus();
}

Status FastVPolicy::PlanPrefillLayer(const PrefillLayerInputs& in, PrefillLayerPlan& plan) {
  const int64_t n = in.q->dim(0), heads = in.q->dim(1), g = in.k->dim(1), d = in.q->dim(2);
  if (in.layer == options_.k - 1) {
    pruned_.assign(static_cast<size_t>(n), 0);
    std::vector<int32_t> visual;
    for (int64_t i = 0; i < n; ++i) {
      if (in.visual != nullptr && in.visual[i] != 0) visual.push_back(static_cast<int32_t>(i));
    }
    if (!visual.empty()) {
      // The last token's attention over the chunk, averaged over heads (one row: cheap).
      const int64_t rep = heads / g, last = n - 1;
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      // On a GPU only what the score reads comes to the host: the last query row and the keys.
      FZ_ASSIGN_OR_RETURN(Tensor last_query, in.q->Slice(last, n));
      Tensor keys = *in.k;
      if (!in.q->device().is_cpu()) {
        FZ_ASSIGN_OR_RETURN(last_query, last_query.To(Device::Cpu()));
        FZ_ASSIGN_OR_RETURN(keys, in.k->To(Device::Cpu()));
      }
      const float* q = last_query.data<float>();
      const float* k = keys.data<float>();
      std::vector<float> mean(static_cast<size_t>(n), 0.f), row(static_cast<size_t>(n));
      for (int64_t h = 0; h < heads; ++h) {
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          float s = 0;
          for (int64_t e = 0; e < d; ++e) s += q[h * d + e] * k[(j * g + h / rep) * d + e];
          row[static_cast<size_t>(j)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        double sum = 0;
        for (float& x : row) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < n; ++j)
          mean[static_cast<size_t>(j)] += row[static_cast<size_t>(j)] / (sum * heads);
      }
      std::vector<float> visual_scores;
      for (int32_t i : visual) visual_scores.push_back(mean[static_cast<size_t>(i)]);
      const int64_t keep_count =
          std::llround(static_cast<double>(visual.size()) * (1.0 - options_.r));
      std::vector<uint8_t> kept(visual.size(), 0);
      for (int32_t i : TopIndices(visual_scores, keep_count)) kept[static_cast<size_t>(i)] = 1;
      for (size_t i = 0; i < visual.size(); ++i) {
        if (kept[i] == 0) pruned_[static_cast<size_t>(visual[i])] = 1;
      }
    }
  }
  if (in.layer < options_.k || pruned_.size() != static_cast<size_t>(n)) return absl::OkStatus();
  plan.sparse = true;
  plan.u_rows = URows::kSkip;
  plan.important.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (pruned_[static_cast<size_t>(i)] != 0) {
      plan.classes[static_cast<size_t>(i)] = kv::kDrop;
    } else {
      plan.important.push_back(static_cast<int32_t>(i));
    }
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::compress
