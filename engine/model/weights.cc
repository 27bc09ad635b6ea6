#include "engine/model/weights.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/logging.h"
#include "engine/model/quantized_tensors.h"

namespace framezip::engine::model {

namespace {
std::string Cat(std::string_view a, std::string_view b) {
  std::string s(a);
  s.append(b);
  return s;
}
bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
}  // namespace

std::string TextName(std::string_view suffix) { return Cat(kTextPrefix, suffix); }
std::string TextLayerName(int64_t layer, std::string_view suffix) {
  return fmt::format("{}layers.{}.{}", kTextPrefix, layer, suffix);
}
std::string VisionName(std::string_view suffix) { return Cat(kVisionPrefix, suffix); }
std::string VisionLayerName(int64_t layer, std::string_view suffix) {
  return fmt::format("{}encoder.layers.{}.{}", kVisionPrefix, layer, suffix);
}
std::string ProjectorName(std::string_view suffix) { return Cat(kProjectorPrefix, suffix); }

std::string CanonicalName(std::string_view stored) {
  // transformers' checkpoint conversion rules for LLaVA models, first match wins, plus the
  // layouts newer versions write: the vision tower without its "vision_model." level (5.x
  // strips it with a PrefixChange) and the language model without "model." level. A prefix must
  // end at a '.' (or the end) so that, e.g., "image_newline_x" is left alone.
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {"model.vision_tower.vision_model", "model.vision_tower.vision_model"},
      {"model.vision_tower", "model.vision_tower.vision_model"},
      {"language_model.model", "model.language_model"},
      {"language_model.lm_head", "lm_head"},
      {"language_model", "model.language_model"},
      {"vision_tower.vision_model", "model.vision_tower.vision_model"},
      {"vision_tower", "model.vision_tower.vision_model"},
      {"multi_modal_projector", "model.multi_modal_projector"},
      {"image_newline", "model.image_newline"},
  };
  for (const auto& [from, to] : kRules) {
    if (StartsWith(stored, from) && (stored.size() == from.size() || stored[from.size()] == '.')) {
      return Cat(to, stored.substr(from.size()));
    }
  }
  return std::string(stored);
}

std::vector<ExpectedTensor> ExpectedTensors(const LlavaConfig& c) {
  std::vector<ExpectedTensor> out;
  auto add = [&out](std::string name, Shape shape, bool required = true) {
    out.push_back({std::move(name), std::move(shape), required});
  };
  auto add_projection = [&out](std::string name, Shape shape) {
    out.push_back({std::move(name), std::move(shape), /*required=*/true,
                   /*decoder_projection=*/true});
  };
  // Vision tower.
  const VisionConfig& v = c.vision;
  const int64_t d = v.hidden_size;
  add(VisionName("embeddings.patch_embedding.weight"),
      {d, v.num_channels, v.patch_size, v.patch_size});
  if (v.patch_embedding_bias()) add(VisionName("embeddings.patch_embedding.bias"), {d});
  if (v.has_class_embedding()) add(VisionName("embeddings.class_embedding"), {d});
  add(VisionName("embeddings.position_embedding.weight"), {v.num_positions(), d});
  if (v.has_pre_layernorm()) {
    add(VisionName("pre_layrnorm.weight"), {d});
    add(VisionName("pre_layrnorm.bias"), {d});
  }
  for (int64_t i = 0; i < v.num_hidden_layers; ++i) {
    for (std::string_view ln : {"layer_norm1", "layer_norm2"}) {
      add(VisionLayerName(i, Cat(ln, ".weight")), {d});
      add(VisionLayerName(i, Cat(ln, ".bias")), {d});
    }
    for (std::string_view p : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      add(VisionLayerName(i, fmt::format("self_attn.{}.weight", p)), {d, d});
      add(VisionLayerName(i, fmt::format("self_attn.{}.bias", p)), {d});
    }
    add(VisionLayerName(i, "mlp.fc1.weight"), {v.intermediate_size, d});
    add(VisionLayerName(i, "mlp.fc1.bias"), {v.intermediate_size});
    add(VisionLayerName(i, "mlp.fc2.weight"), {d, v.intermediate_size});
    add(VisionLayerName(i, "mlp.fc2.bias"), {d});
  }
  // Present in checkpoints but unused by LLaVA (features are taken before it).
  add(VisionName("post_layernorm.weight"), {d}, false);
  add(VisionName("post_layernorm.bias"), {d}, false);

  // Projector.
  const TextConfig& t = c.text;
  const int64_t h = t.hidden_size;
  add(ProjectorName("linear_1.weight"), {h, c.projector_input_dim()});
  if (c.projector_bias) add(ProjectorName("linear_1.bias"), {h});
  add(ProjectorName("linear_2.weight"), {h, h});
  if (c.projector_bias) add(ProjectorName("linear_2.bias"), {h});
  if (c.has_image_newline) add(std::string(kImageNewline), {h});

  // Language model.
  add(TextName("embed_tokens.weight"), {t.vocab_size, h});
  for (int64_t i = 0; i < t.num_hidden_layers; ++i) {
    add(TextLayerName(i, "input_layernorm.weight"), {h});
    add_projection(TextLayerName(i, "self_attn.q_proj.weight"), {t.q_dim(), h});
    add_projection(TextLayerName(i, "self_attn.k_proj.weight"), {t.kv_dim(), h});
    add_projection(TextLayerName(i, "self_attn.v_proj.weight"), {t.kv_dim(), h});
    if (t.qkv_bias) {
      add(TextLayerName(i, "self_attn.q_proj.bias"), {t.q_dim()});
      add(TextLayerName(i, "self_attn.k_proj.bias"), {t.kv_dim()});
      add(TextLayerName(i, "self_attn.v_proj.bias"), {t.kv_dim()});
    }
    add_projection(TextLayerName(i, "self_attn.o_proj.weight"), {h, t.q_dim()});
    if (t.o_bias) add(TextLayerName(i, "self_attn.o_proj.bias"), {h});
    add(TextLayerName(i, "post_attention_layernorm.weight"), {h});
    add_projection(TextLayerName(i, "mlp.gate_proj.weight"), {t.intermediate_size, h});
    add_projection(TextLayerName(i, "mlp.up_proj.weight"), {t.intermediate_size, h});
    add_projection(TextLayerName(i, "mlp.down_proj.weight"), {h, t.intermediate_size});
    if (t.mlp_bias) {
      add(TextLayerName(i, "mlp.gate_proj.bias"), {t.intermediate_size});
      add(TextLayerName(i, "mlp.up_proj.bias"), {t.intermediate_size});
      add(TextLayerName(i, "mlp.down_proj.bias"), {h});
    }
  }
  add(TextName("norm.weight"), {h});
  add(std::string(kLmHead), {t.vocab_size, h}, /*required=*/!c.tie_word_embeddings);
  return out;
}

// Binds the quantised projection `e` (stored as `stored`, dtype I8 or F8_E4M3) with its
// `<linear>.weight_scale`: int8 stays int8 beside an f32 [N] `<e.name>_scale`; FP8 becomes bf16
// (quantized_tensors.h). A zero point, if stored, must be all zeros: the weights are symmetric.
Status ModelWeights::BindQuantized(
    const ExpectedTensor& e, const std::string& stored, Tensor weight,
    const std::map<std::string, std::string, std::less<>>& canonical_to_stored,
    const SafetensorsModel& files, ModelWeights& w) {
  const std::string scale_name = e.name + "_scale";
  const auto it = canonical_to_stored.find(scale_name);
  const bool fp8 = weight.dtype() == DType::kF8E4M3;
  if (it == canonical_to_stored.end()) {
    return InvalidArgumentError("tensor {} is {} but {} is missing", e.name, fp8 ? "FP8" : "int8",
                                scale_name);
  }
  FZ_ASSIGN_OR_RETURN(Tensor scale, ReadChannelScales({.name = scale_name,
                                                       .stored_name = it->second,
                                                       .channels = e.shape[0],
                                                       .per_tensor_allowed = fp8},
                                                      files));
  const std::string zero_point = e.name + "_zero_point";
  if (const auto zp = canonical_to_stored.find(zero_point); zp != canonical_to_stored.end()) {
    FZ_ASSIGN_OR_RETURN(const Tensor z, files.Get(zp->second));
    FZ_RETURN_IF_ERROR(CheckZeroPointIsZero(zero_point, z));
  }
  if (fp8) {
    // The scale is consumed here: no tensor of that name is kept, so nothing downstream mistakes
    // it for an int8 weight's scale; its stored name is recorded so it does not count as unused.
    FZ_ASSIGN_OR_RETURN(weight, DecodeFp8Weight(e.name, weight, scale));
  } else {
    w.tensors_.emplace(scale_name, std::move(scale));
  }
  w.stored_names_.emplace(scale_name, it->second);
  w.tensors_.emplace(e.name, std::move(weight));
  w.stored_names_.emplace(e.name, stored);
  return absl::OkStatus();
}

StatusOr<ModelWeights> ModelWeights::Load(const std::filesystem::path& dir,
                                          const LlavaConfig& config) {
  FZ_ASSIGN_OR_RETURN(SafetensorsModel files, SafetensorsModel::Open(dir));
  return Bind(config, files);
}

StatusOr<ModelWeights> ModelWeights::Bind(const LlavaConfig& config,
                                          const SafetensorsModel& files) {
  ModelWeights w;
  // Canonical name -> stored name, rejecting two stored keys that collapse to one name.
  std::map<std::string, std::string, std::less<>> canonical_to_stored;
  bool saw_legacy = false, saw_current = false;
  for (const std::string& stored : files.Names()) {
    if (EndsWith(stored, ".rotary_emb.inv_freq")) continue;  // non-persistent buffer
    std::string canonical = CanonicalName(stored);
    (StartsWith(stored, "model.") || StartsWith(stored, "lm_head") ? saw_current : saw_legacy) =
        true;
    auto [it, inserted] = canonical_to_stored.emplace(canonical, stored);
    if (!inserted) {
      return InvalidArgumentError("tensors {} and {} are both {}", it->second, stored, canonical);
    }
  }
  w.scheme_ = saw_legacy && saw_current ? KeyScheme::kMixed
              : saw_legacy              ? KeyScheme::kLegacy
                                        : KeyScheme::kCurrent;

  const std::vector<ExpectedTensor> expected = ExpectedTensors(config);
  for (const ExpectedTensor& e : expected) {
    auto it = canonical_to_stored.find(e.name);
    const bool tied_head = e.name == kLmHead && config.tie_word_embeddings;
    if (it == canonical_to_stored.end() || tied_head) {
      if (e.required) return InvalidArgumentError("missing tensor {}", e.name);
      continue;
    }
    const TensorInfo* info = files.Find(it->second);
    FZ_CHECK(info != nullptr);
    const std::string shown =
        it->second == e.name ? e.name : fmt::format("{} (stored as {})", e.name, it->second);
    const bool quantized = e.decoder_projection &&
                           ((info->dtype_name == "I8" &&
                             config.stored_quantization == StoredQuantization::kInt8PerChannel) ||
                            (info->dtype_name == "F8_E4M3" &&
                             config.stored_quantization == StoredQuantization::kFp8PerChannel));
    if (info->dtype_name != "F32" && info->dtype_name != "F16" && info->dtype_name != "BF16" &&
        !quantized) {
      return InvalidArgumentError(
          "tensor {} has dtype {}, expected F32, F16 or BF16 (I8 or F8_E4M3 only for the "
          "decoder's projections of a compressed-tensors int8 or FP8 checkpoint) (in {})",
          shown, info->dtype_name, files.FileOf(it->second));
    }
    if (info->shape != e.shape) {
      return InvalidArgumentError("tensor {} has shape {}, expected {} (in {})", shown,
                                  ShapeString(info->shape), ShapeString(e.shape),
                                  files.FileOf(it->second));
    }
    FZ_ASSIGN_OR_RETURN(Tensor t, files.Get(it->second));
    if (quantized) {
      FZ_RETURN_IF_ERROR(BindQuantized(e, it->second, std::move(t), canonical_to_stored, files, w));
      continue;
    }
    w.tensors_.emplace(e.name, std::move(t));
    w.stored_names_.emplace(e.name, it->second);
  }
  const Tensor& embed = w.tensors_.at(TextName("embed_tokens.weight"));
  if (config.tie_word_embeddings) w.tensors_.emplace(std::string(kLmHead), embed);
  w.dtype_ = embed.dtype();

  // Keep unexpected tensors reachable (e.g. a SigLIP head) but say that they are unused.
  size_t unused = 0;
  std::string first_unused;
  for (const auto& [canonical, stored] : canonical_to_stored) {
    if (w.tensors_.count(canonical) != 0 || w.stored_names_.count(canonical) != 0) continue;
    if (canonical == kLmHead && config.tie_word_embeddings) continue;  // tied: ignored on purpose
    if (unused++ == 0) first_unused = stored;
    auto t = files.Get(stored);
    if (t.ok()) {
      w.tensors_.emplace(canonical, *std::move(t));
      w.stored_names_.emplace(canonical, stored);
    }
  }
  if (unused > 0) {
    FZ_LOG_INFO("weights: {} tensor(s) not used by the model (first: {})", unused, first_unused);
  }
  return w;
}

const Tensor* ModelWeights::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

bool ModelWeights::Has(std::string_view name) const { return Find(name) != nullptr; }

const Tensor& ModelWeights::Get(std::string_view name) const {
  const Tensor* t = Find(name);
  if (t == nullptr) CheckFailed(__FILE__, __LINE__, fmt::format("no weight named {}", name));
  return *t;
}

std::vector<std::string> ModelWeights::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors_) names.push_back(name);
  return names;
}

std::string ModelWeights::StoredName(std::string_view name) const {
  auto it = stored_names_.find(name);
  return it == stored_names_.end() ? std::string() : it->second;
}

namespace {
Tensor OrEmpty(const ModelWeights& w, const std::string& name) {
  const Tensor* t = w.Find(name);
  return t == nullptr ? Tensor() : *t;
}
}  // namespace

TextLayerWeights ModelWeights::TextLayer(int64_t i) const {
  TextLayerWeights l;
  l.input_layernorm = Get(TextLayerName(i, "input_layernorm.weight"));
  l.q_proj = Get(TextLayerName(i, "self_attn.q_proj.weight"));
  l.k_proj = Get(TextLayerName(i, "self_attn.k_proj.weight"));
  l.v_proj = Get(TextLayerName(i, "self_attn.v_proj.weight"));
  l.o_proj = Get(TextLayerName(i, "self_attn.o_proj.weight"));
  l.q_bias = OrEmpty(*this, TextLayerName(i, "self_attn.q_proj.bias"));
  l.k_bias = OrEmpty(*this, TextLayerName(i, "self_attn.k_proj.bias"));
  l.v_bias = OrEmpty(*this, TextLayerName(i, "self_attn.v_proj.bias"));
  l.o_bias = OrEmpty(*this, TextLayerName(i, "self_attn.o_proj.bias"));
  l.post_attention_layernorm = Get(TextLayerName(i, "post_attention_layernorm.weight"));
  l.gate_proj = Get(TextLayerName(i, "mlp.gate_proj.weight"));
  l.up_proj = Get(TextLayerName(i, "mlp.up_proj.weight"));
  l.down_proj = Get(TextLayerName(i, "mlp.down_proj.weight"));
  l.gate_bias = OrEmpty(*this, TextLayerName(i, "mlp.gate_proj.bias"));
  l.up_bias = OrEmpty(*this, TextLayerName(i, "mlp.up_proj.bias"));
  l.down_bias = OrEmpty(*this, TextLayerName(i, "mlp.down_proj.bias"));
  return l;
}

VisionLayerWeights ModelWeights::VisionLayer(int64_t i) const {
  VisionLayerWeights l;
  l.layer_norm1_weight = Get(VisionLayerName(i, "layer_norm1.weight"));
  l.layer_norm1_bias = Get(VisionLayerName(i, "layer_norm1.bias"));
  l.q_proj = Get(VisionLayerName(i, "self_attn.q_proj.weight"));
  l.q_bias = Get(VisionLayerName(i, "self_attn.q_proj.bias"));
  l.k_proj = Get(VisionLayerName(i, "self_attn.k_proj.weight"));
  l.k_bias = Get(VisionLayerName(i, "self_attn.k_proj.bias"));
  l.v_proj = Get(VisionLayerName(i, "self_attn.v_proj.weight"));
  l.v_bias = Get(VisionLayerName(i, "self_attn.v_proj.bias"));
  l.out_proj = Get(VisionLayerName(i, "self_attn.out_proj.weight"));
  l.out_bias = Get(VisionLayerName(i, "self_attn.out_proj.bias"));
  l.layer_norm2_weight = Get(VisionLayerName(i, "layer_norm2.weight"));
  l.layer_norm2_bias = Get(VisionLayerName(i, "layer_norm2.bias"));
  l.fc1 = Get(VisionLayerName(i, "mlp.fc1.weight"));
  l.fc1_bias = Get(VisionLayerName(i, "mlp.fc1.bias"));
  l.fc2 = Get(VisionLayerName(i, "mlp.fc2.weight"));
  l.fc2_bias = Get(VisionLayerName(i, "mlp.fc2.bias"));
  return l;
}

}  // namespace framezip::engine::model
