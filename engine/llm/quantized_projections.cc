#include "engine/llm/quantized_projections.h"

#include <tuple>
#include <utility>

#include "engine/ops/quantize_fp8.h"
#include "engine/ops/quantize_int8.h"

namespace framezip::engine::llm {
namespace {

bool Quantized(const Tensor& weight) {
  return weight.dtype() == DType::kI8 || weight.dtype() == DType::kF8E4M3;
}

// `weight` becomes its 8-bit copy and `scale` its scales, unless it is quantised already.
template <class Quantize>
Status QuantizeInPlace(Tensor& weight, Tensor& scale, Quantize quantize) {
  if (Quantized(weight)) return absl::OkStatus();
  FZ_ASSIGN_OR_RETURN(auto q, quantize(weight));
  weight = std::move(q.q);
  scale = std::move(q.scale);
  return absl::OkStatus();
}

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
    FZ_RETURN_IF_ERROR(Annotate(QuantizeInPlace(*proj, *scale, ops::QuantizeWeightInt8), name));
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
    FZ_RETURN_IF_ERROR(Annotate(QuantizeInPlace(*proj, *scale, ops::QuantizeWeightFp8), name));
  }
  return kept;
}

}  // namespace framezip::engine::llm
