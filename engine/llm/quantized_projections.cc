#include "engine/llm/quantized_projections.h"

#include <tuple>

#include "engine/ops/quantize_fp8.h"
#include "engine/ops/quantize_int8.h"

namespace framezip::engine::llm {
namespace {

// Every quantisable projection of `weights` with its scale slot and its name, the head first.
std::vector<std::tuple<Tensor*, Tensor*, std::string>> Projections(DecoderWeights& weights) {
  std::vector<std::tuple<Tensor*, Tensor*, std::string>> out = {
      {&weights.lm_head, &weights.lm_head_scale, "lm_head"}};
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    for (const auto& proj : LayerProjections(weights.layers[l])) {
      out.emplace_back(proj.weight, proj.scale, fmt::format("layers.{}.{}", l, proj.name));
    }
  }
  return out;
}

}  // namespace

Status QuantizeProjectionsInt8(DecoderWeights& weights, bool lm_head) {
  for (const auto& [proj, scale, name] : Projections(weights)) {
    if (proj == &weights.lm_head && !lm_head) continue;
    FZ_RETURN_IF_ERROR(Annotate(ops::QuantizeWeightInt8InPlace(*proj, *scale), name));
  }
  return absl::OkStatus();
}

StatusOr<std::vector<std::string>> QuantizeProjectionsFp8(DecoderWeights& weights) {
  std::vector<std::string> kept;
  for (const auto& [proj, scale, name] : Projections(weights)) {
    if (proj->rank() == 2 && (proj->dim(1) % 16 != 0 || proj->dim(0) % 4 != 0)) {
      kept.push_back(fmt::format("{} {}", name, ShapeString(proj->shape())));
      continue;
    }
    FZ_RETURN_IF_ERROR(Annotate(ops::QuantizeWeightFp8InPlace(*proj, *scale), name));
  }
  return kept;
}

}  // namespace framezip::engine::llm
