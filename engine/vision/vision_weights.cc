#include "engine/vision/vision_weights.h"

#include <algorithm>
#include <utility>

#include "engine/model/weights.h"
#include "engine/ops/linear.h"
#include "fmt/format.h"

namespace framezip::engine::vision {
namespace {

bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Looks `name` up and checks its shape and dtype.
StatusOr<Tensor> Bind(const WeightLookup& lookup, const std::string& name, const Shape& shape) {
  StatusOr<Tensor> t = lookup(name);
  if (!t.ok()) return t.status();
  if (t->shape() != shape) {
    return InvalidArgumentError("weight {}: shape {}, the config implies {}", name,
                                ShapeString(t->shape()), ShapeString(shape));
  }
  if (!IsFloat(t->dtype())) {
    return InvalidArgumentError("weight {}: dtype {}, expected f32, f16 or bf16", name,
                                DTypeName(t->dtype()));
  }
  return t;
}

Status BindLayer(const WeightLookup& lookup, const model::VisionConfig& v, int64_t index,
                 EncoderLayerWeights& w) {
  const std::string p = fmt::format("{}encoder.layers.{}.", kVisionTowerPrefix, index);
  const int64_t D = v.hidden_size, I = v.intermediate_size;
  FZ_ASSIGN_OR_RETURN(w.ln1_weight, Bind(lookup, p + "layer_norm1.weight", {D}));
  FZ_ASSIGN_OR_RETURN(w.ln1_bias, Bind(lookup, p + "layer_norm1.bias", {D}));
  FZ_ASSIGN_OR_RETURN(w.q_weight, Bind(lookup, p + "self_attn.q_proj.weight", {D, D}));
  FZ_ASSIGN_OR_RETURN(w.q_bias, Bind(lookup, p + "self_attn.q_proj.bias", {D}));
  FZ_ASSIGN_OR_RETURN(w.k_weight, Bind(lookup, p + "self_attn.k_proj.weight", {D, D}));
  FZ_ASSIGN_OR_RETURN(w.k_bias, Bind(lookup, p + "self_attn.k_proj.bias", {D}));
  FZ_ASSIGN_OR_RETURN(w.v_weight, Bind(lookup, p + "self_attn.v_proj.weight", {D, D}));
  FZ_ASSIGN_OR_RETURN(w.v_bias, Bind(lookup, p + "self_attn.v_proj.bias", {D}));
  FZ_ASSIGN_OR_RETURN(w.out_weight, Bind(lookup, p + "self_attn.out_proj.weight", {D, D}));
  FZ_ASSIGN_OR_RETURN(w.out_bias, Bind(lookup, p + "self_attn.out_proj.bias", {D}));
  FZ_ASSIGN_OR_RETURN(w.ln2_weight, Bind(lookup, p + "layer_norm2.weight", {D}));
  FZ_ASSIGN_OR_RETURN(w.ln2_bias, Bind(lookup, p + "layer_norm2.bias", {D}));
  FZ_ASSIGN_OR_RETURN(w.fc1_weight, Bind(lookup, p + "mlp.fc1.weight", {I, D}));
  FZ_ASSIGN_OR_RETURN(w.fc1_bias, Bind(lookup, p + "mlp.fc1.bias", {I}));
  FZ_ASSIGN_OR_RETURN(w.fc2_weight, Bind(lookup, p + "mlp.fc2.weight", {D, I}));
  FZ_ASSIGN_OR_RETURN(w.fc2_bias, Bind(lookup, p + "mlp.fc2.bias", {D}));
  return absl::OkStatus();
}

}  // namespace

StatusOr<int64_t> LayersNeeded(const model::LlavaConfig& config) {
  const int64_t L = config.vision.num_hidden_layers;
  if (config.vision_feature_layers.empty()) {
    return InvalidArgumentError("config.json: vision_feature_layer: empty list");
  }
  int64_t deepest = 0;
  for (int64_t layer : config.vision_feature_layers) {
    // hidden_states has L + 1 entries; Python indexing accepts [-(L+1), L].
    if (layer < -(L + 1) || layer > L) {
      return InvalidArgumentError(
          "config.json: vision_feature_layer {} is out of range for a tower of {} layers "
          "(hidden_states has {} entries)",
          layer, L, L + 1);
    }
    deepest = std::max(deepest, layer < 0 ? layer + L + 1 : layer);
  }
  return deepest;
}

StatusOr<LlavaVisionWeights> BindLlavaVisionWeights(const model::LlavaConfig& config,
                                                    const WeightLookup& lookup) {
  const model::VisionConfig& v = config.vision;
  const int64_t D = v.hidden_size, C = v.num_channels, P = v.patch_size;
  const int64_t H = config.text.hidden_size;
  if (D <= 0 || P <= 0 || C <= 0 || v.image_size < P || H <= 0 || v.intermediate_size <= 0) {
    return InvalidArgumentError(
        "config.json: vision_config (hidden {}, patch {}, channels {}, image {}, intermediate {}) "
        "or text hidden {} is not a usable shape",
        D, P, C, v.image_size, v.intermediate_size, H);
  }
  LlavaVisionWeights w;
  VisionTowerWeights& t = w.tower;
  const std::string p = kVisionTowerPrefix;
  FZ_ASSIGN_OR_RETURN(Tensor conv,
                      Bind(lookup, p + "embeddings.patch_embedding.weight", {D, C, P, P}));
  FZ_ASSIGN_OR_RETURN(t.patch_weight, conv.Reshape({D, C * P * P}));
  if (v.patch_embedding_bias()) {
    FZ_ASSIGN_OR_RETURN(t.patch_bias, Bind(lookup, p + "embeddings.patch_embedding.bias", {D}));
  }
  if (v.has_class_embedding()) {
    FZ_ASSIGN_OR_RETURN(t.class_embedding, Bind(lookup, p + "embeddings.class_embedding", {D}));
  }
  FZ_ASSIGN_OR_RETURN(t.position_embedding, Bind(lookup, p + "embeddings.position_embedding.weight",
                                                 {v.num_positions(), D}));
  if (v.has_pre_layernorm()) {
    FZ_ASSIGN_OR_RETURN(t.pre_ln_weight, Bind(lookup, p + "pre_layrnorm.weight", {D}));
    FZ_ASSIGN_OR_RETURN(t.pre_ln_bias, Bind(lookup, p + "pre_layrnorm.bias", {D}));
  }
  FZ_ASSIGN_OR_RETURN(const int64_t layers, LayersNeeded(config));
  t.layers.resize(static_cast<size_t>(layers));
  for (int64_t i = 0; i < layers; ++i) FZ_RETURN_IF_ERROR(BindLayer(lookup, v, i, t.layers[i]));

  const std::string q = "model.multi_modal_projector.";
  ProjectorWeights& pr = w.projector;
  FZ_ASSIGN_OR_RETURN(pr.linear1_weight,
                      Bind(lookup, q + "linear_1.weight", {H, config.projector_input_dim()}));
  FZ_ASSIGN_OR_RETURN(pr.linear2_weight, Bind(lookup, q + "linear_2.weight", {H, H}));
  if (config.projector_bias) {
    FZ_ASSIGN_OR_RETURN(pr.linear1_bias, Bind(lookup, q + "linear_1.bias", {H}));
    FZ_ASSIGN_OR_RETURN(pr.linear2_bias, Bind(lookup, q + "linear_2.bias", {H}));
  }
  if (config.has_image_newline) {
    FZ_ASSIGN_OR_RETURN(w.image_newline, Bind(lookup, "model.image_newline", {H}));
  }
  return w;
}

StatusOr<LlavaVisionWeights> BindLlavaVisionWeights(const model::LlavaConfig& config,
                                                    const model::ModelWeights& weights) {
  return BindLlavaVisionWeights(config, [&weights](const std::string& name) -> StatusOr<Tensor> {
    const Tensor* t = weights.Find(name);
    if (t == nullptr) return NotFoundError("weight {} is not in the checkpoint", name);
    return *t;
  });
}

Status PrepareVisionWeights(LlavaVisionWeights& weights) {
  ops::PrepareLinearWeight(weights.tower.patch_weight);
  for (EncoderLayerWeights& l : weights.tower.layers) {
    for (const auto& [t, scale] : {std::pair{&l.q_weight, &l.q_scale},
                                   {&l.k_weight, &l.k_scale},
                                   {&l.v_weight, &l.v_scale},
                                   {&l.out_weight, &l.out_scale},
                                   {&l.fc1_weight, &l.fc1_scale},
                                   {&l.fc2_weight, &l.fc2_scale}}) {
      // int8: packed only from here on; 16-bit: readied, kept as it is.
      FZ_ASSIGN_OR_RETURN(*t, ops::PackLinearWeight(*t, *scale));
    }
  }
  ops::PrepareLinearWeight(weights.projector.linear1_weight);
  ops::PrepareLinearWeight(weights.projector.linear2_weight);
  return absl::OkStatus();
}

}  // namespace framezip::engine::vision
