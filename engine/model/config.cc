#include "engine/model/config.h"

#include <fstream>
#include <sstream>

#include "engine/model/json_util.h"
#include "engine/model/stored_quantization.h"

namespace framezip::engine::model {

StatusOr<Activation> ParseActivation(std::string_view name) {
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu" || name == "gelu_python") return Activation::kGeluErf;
  // gelu_new / gelu_fast / gelu_pytorch_tanh are the same tanh approximation written three ways.
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast")
    return Activation::kGeluTanh;
  if (name == "quick_gelu") return Activation::kQuickGelu;
  if (name == "relu") return Activation::kRelu;
  return UnimplementedError("unsupported activation '{}'", name);
}

StatusOr<std::string> ReadFileToString(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFoundError("{} not found", path.string());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open {}", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLossError("error reading {}", path.string());
  return ss.str();
}

namespace {

StatusOr<Activation> ActivationField(const Json& obj, std::string_view key,
                                     std::string_view fallback, const JsonPath& at) {
  FZ_ASSIGN_OR_RETURN(std::string name, StringOr(obj, key, fallback, at));
  auto act = ParseActivation(name);
  if (!act.ok()) return Annotate(act.status(), fmt::format("{}: {}", at.file, at.Field(key)));
  return *act;
}

Status RequirePositive(int64_t v, std::string_view field, const JsonPath& at) {
  if (v <= 0)
    return InvalidArgumentError("{}: {} must be positive, got {}", at.file, at.Field(field), v);
  return absl::OkStatus();
}

// rope_scaling (v4) or rope_parameters (v5, which also carries rope_theta).
Status ParseRope(const Json& obj, const JsonPath& at, TextConfig& t) {
  const Json* rp = FindField(obj, "rope_parameters");
  const Json* rs = FindField(obj, "rope_scaling");
  const Json* r = rs != nullptr ? rs : rp;
  const std::string key = rs != nullptr ? "rope_scaling" : "rope_parameters";
  if (rp != nullptr && rp->is_object()) {
    FZ_ASSIGN_OR_RETURN(t.rope_theta,
                        DoubleOr(*rp, "rope_theta", t.rope_theta, at.Child("rope_parameters")));
  }
  if (r == nullptr) return absl::OkStatus();
  if (!r->is_object()) {
    return InvalidArgumentError("{}: {}: expected an object, got {}", at.file, at.Field(key),
                                JsonTypeName(*r));
  }
  const JsonPath rat = at.Child(key);
  // "rope_type" is the current key; "type" the legacy one.
  FZ_ASSIGN_OR_RETURN(std::optional<std::string> type, OptionalString(*r, "rope_type", rat));
  if (!type) {
    FZ_ASSIGN_OR_RETURN(type, OptionalString(*r, "type", rat));
  }
  const std::string kind = type.value_or("default");
  RopeScaling& s = t.rope_scaling;
  if (kind == "default") {
    s.type = RopeScaling::Type::kDefault;
  } else if (kind == "linear") {
    s.type = RopeScaling::Type::kLinear;
    FZ_ASSIGN_OR_RETURN(s.factor, DoubleOr(*r, "factor", 1.0, rat));
  } else if (kind == "llama3") {
    s.type = RopeScaling::Type::kLlama3;
    FZ_ASSIGN_OR_RETURN(s.factor, DoubleOr(*r, "factor", 8.0, rat));
    FZ_ASSIGN_OR_RETURN(s.low_freq_factor, DoubleOr(*r, "low_freq_factor", 1.0, rat));
    FZ_ASSIGN_OR_RETURN(s.high_freq_factor, DoubleOr(*r, "high_freq_factor", 4.0, rat));
    FZ_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                        IntOr(*r, "original_max_position_embeddings", 8192, rat));
  } else {
    return UnimplementedError("{}: {}: rope type '{}' is not supported (default, linear, llama3)",
                              at.file, at.Field(key), kind);
  }
  return absl::OkStatus();
}

// Class defaults of transformers' Qwen2Config / LlamaConfig (used for absent fields).
struct TextDefaults {
  int64_t vocab, hidden, intermediate, layers, heads, max_pos;
  double eps;
};
constexpr TextDefaults kQwen2Defaults{151936, 4096, 22016, 32, 32, 32768, 1e-6};
constexpr TextDefaults kLlamaDefaults{32000, 4096, 11008, 32, 32, 2048, 1e-6};

StatusOr<TextConfig> ParseTextConfig(const Json& obj, std::string_view default_type,
                                     const JsonPath& at) {
  TextConfig t;
  FZ_ASSIGN_OR_RETURN(t.model_type, StringOr(obj, "model_type", default_type, at));
  TextDefaults d{};
  if (t.model_type == "qwen2") {
    t.arch = TextArch::kQwen2;
    d = kQwen2Defaults;
  } else if (t.model_type == "llama") {
    t.arch = TextArch::kLlama;
    d = kLlamaDefaults;
  } else {
    return UnimplementedError("{}: {}: text model_type '{}' is not supported (qwen2, llama)",
                              at.file, at.Field("model_type"), t.model_type);
  }
  FZ_ASSIGN_OR_RETURN(t.vocab_size, IntOr(obj, "vocab_size", d.vocab, at));
  FZ_ASSIGN_OR_RETURN(t.hidden_size, IntOr(obj, "hidden_size", d.hidden, at));
  FZ_ASSIGN_OR_RETURN(t.intermediate_size, IntOr(obj, "intermediate_size", d.intermediate, at));
  FZ_ASSIGN_OR_RETURN(t.num_hidden_layers, IntOr(obj, "num_hidden_layers", d.layers, at));
  FZ_ASSIGN_OR_RETURN(t.num_attention_heads, IntOr(obj, "num_attention_heads", d.heads, at));
  // Both classes: num_key_value_heads None -> num_attention_heads (plain MHA).
  FZ_ASSIGN_OR_RETURN(t.num_key_value_heads,
                      IntOr(obj, "num_key_value_heads", t.num_attention_heads, at));
  FZ_ASSIGN_OR_RETURN(t.max_position_embeddings,
                      IntOr(obj, "max_position_embeddings", d.max_pos, at));
  FZ_ASSIGN_OR_RETURN(t.rms_norm_eps, DoubleOr(obj, "rms_norm_eps", d.eps, at));
  FZ_ASSIGN_OR_RETURN(t.rope_theta, DoubleOr(obj, "rope_theta", 10000.0, at));
  FZ_RETURN_IF_ERROR(ParseRope(obj, at, t));
  FZ_ASSIGN_OR_RETURN(t.hidden_act, ActivationField(obj, "hidden_act", "silu", at));
  FZ_ASSIGN_OR_RETURN(t.tie_word_embeddings, BoolOr(obj, "tie_word_embeddings", false, at));
  if (t.arch == TextArch::kQwen2) {
    // Qwen2Attention: q/k/v always biased, o_proj never; the MLP has no bias.
    t.qkv_bias = true;
    t.o_bias = false;
    t.mlp_bias = false;
    FZ_ASSIGN_OR_RETURN(t.use_sliding_window, BoolOr(obj, "use_sliding_window", false, at));
    FZ_ASSIGN_OR_RETURN(t.sliding_window, IntOr(obj, "sliding_window", 4096, at));
    FZ_ASSIGN_OR_RETURN(t.max_window_layers, IntOr(obj, "max_window_layers", 28, at));
    // Qwen2Config: sliding_window = sliding_window if use_sliding_window else None.
    if (!t.use_sliding_window) t.sliding_window = 0;
  } else {
    FZ_ASSIGN_OR_RETURN(bool attention_bias, BoolOr(obj, "attention_bias", false, at));
    t.qkv_bias = t.o_bias = attention_bias;
    FZ_ASSIGN_OR_RETURN(t.mlp_bias, BoolOr(obj, "mlp_bias", false, at));
  }
  for (auto [key, v] : {std::pair<std::string_view, int64_t>{"vocab_size", t.vocab_size},
                        {"hidden_size", t.hidden_size},
                        {"intermediate_size", t.intermediate_size},
                        {"num_hidden_layers", t.num_hidden_layers},
                        {"num_attention_heads", t.num_attention_heads},
                        {"num_key_value_heads", t.num_key_value_heads},
                        {"max_position_embeddings", t.max_position_embeddings}}) {
    FZ_RETURN_IF_ERROR(RequirePositive(v, key, at));
  }
  FZ_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, OptionalInt(obj, "head_dim", at));
  if (head_dim) {
    t.head_dim = *head_dim;
  } else {
    if (t.hidden_size % t.num_attention_heads != 0) {
      return InvalidArgumentError("{}: {} ({}) is not divisible by {} ({})", at.file,
                                  at.Field("hidden_size"), t.hidden_size,
                                  at.Field("num_attention_heads"), t.num_attention_heads);
    }
    t.head_dim = t.hidden_size / t.num_attention_heads;
  }
  FZ_RETURN_IF_ERROR(RequirePositive(t.head_dim, "head_dim", at));
  if (t.head_dim % 2 != 0) {
    return InvalidArgumentError("{}: {} must be even for RoPE, got {}", at.file,
                                at.Field("head_dim"), t.head_dim);
  }
  if (t.num_attention_heads % t.num_key_value_heads != 0) {
    return InvalidArgumentError("{}: {} ({}) is not a multiple of {} ({})", at.file,
                                at.Field("num_attention_heads"), t.num_attention_heads,
                                at.Field("num_key_value_heads"), t.num_key_value_heads);
  }
  if (!(t.rms_norm_eps > 0)) {
    return InvalidArgumentError("{}: {} must be positive", at.file, at.Field("rms_norm_eps"));
  }
  if (!(t.rope_theta > 0)) {
    return InvalidArgumentError("{}: {} must be positive", at.file, at.Field("rope_theta"));
  }
  FZ_ASSIGN_OR_RETURN(t.bos_token_id, OptionalInt(obj, "bos_token_id", at));
  FZ_ASSIGN_OR_RETURN(std::vector<int64_t> eos, IntOrIntList(obj, "eos_token_id", at));
  if (!eos.empty()) t.eos_token_id = eos.front();
  FZ_ASSIGN_OR_RETURN(t.pad_token_id, OptionalInt(obj, "pad_token_id", at));
  if (t.arch == TextArch::kLlama) {
    // LlamaConfig's own defaults: bos 1, eos 2.
    if (!t.bos_token_id && !obj.contains("bos_token_id")) t.bos_token_id = 1;
    if (!t.eos_token_id && !obj.contains("eos_token_id")) t.eos_token_id = 2;
  }
  return t;
}

// Class defaults: SiglipVisionConfig / CLIPVisionConfig.
StatusOr<VisionConfig> ParseVisionConfig(const Json& obj, std::string_view default_type,
                                         const JsonPath& at) {
  VisionConfig v;
  FZ_ASSIGN_OR_RETURN(v.model_type, StringOr(obj, "model_type", default_type, at));
  int64_t patch = 0;
  double eps = 0;
  std::string_view act;
  if (v.model_type == "siglip_vision_model") {
    v.arch = VisionArch::kSiglip;
    patch = 16;
    eps = 1e-6;
    act = "gelu_pytorch_tanh";
  } else if (v.model_type == "clip_vision_model") {
    v.arch = VisionArch::kClip;
    patch = 32;
    eps = 1e-5;
    act = "quick_gelu";
  } else {
    return UnimplementedError(
        "{}: {}: vision model_type '{}' is not supported (siglip_vision_model, clip_vision_model)",
        at.file, at.Field("model_type"), v.model_type);
  }
  FZ_ASSIGN_OR_RETURN(v.hidden_size, IntOr(obj, "hidden_size", 768, at));
  FZ_ASSIGN_OR_RETURN(v.intermediate_size, IntOr(obj, "intermediate_size", 3072, at));
  FZ_ASSIGN_OR_RETURN(v.num_hidden_layers, IntOr(obj, "num_hidden_layers", 12, at));
  FZ_ASSIGN_OR_RETURN(v.num_attention_heads, IntOr(obj, "num_attention_heads", 12, at));
  FZ_ASSIGN_OR_RETURN(v.num_channels, IntOr(obj, "num_channels", 3, at));
  FZ_ASSIGN_OR_RETURN(v.image_size, IntOr(obj, "image_size", 224, at));
  FZ_ASSIGN_OR_RETURN(v.patch_size, IntOr(obj, "patch_size", patch, at));
  FZ_ASSIGN_OR_RETURN(v.layer_norm_eps, DoubleOr(obj, "layer_norm_eps", eps, at));
  FZ_ASSIGN_OR_RETURN(v.hidden_act, ActivationField(obj, "hidden_act", act, at));
  FZ_ASSIGN_OR_RETURN(v.vision_use_head,
                      BoolOr(obj, "vision_use_head", v.arch == VisionArch::kSiglip, at));
  for (auto [key, x] : {std::pair<std::string_view, int64_t>{"hidden_size", v.hidden_size},
                        {"intermediate_size", v.intermediate_size},
                        {"num_hidden_layers", v.num_hidden_layers},
                        {"num_attention_heads", v.num_attention_heads},
                        {"num_channels", v.num_channels},
                        {"image_size", v.image_size},
                        {"patch_size", v.patch_size}}) {
    FZ_RETURN_IF_ERROR(RequirePositive(x, key, at));
  }
  if (v.hidden_size % v.num_attention_heads != 0) {
    return InvalidArgumentError("{}: {} ({}) is not divisible by {} ({})", at.file,
                                at.Field("hidden_size"), v.hidden_size,
                                at.Field("num_attention_heads"), v.num_attention_heads);
  }
  v.head_dim = v.hidden_size / v.num_attention_heads;
  if (v.patch_size > v.image_size) {
    return InvalidArgumentError("{}: {} ({}) exceeds {} ({})", at.file, at.Field("patch_size"),
                                v.patch_size, at.Field("image_size"), v.image_size);
  }
  if (!(v.layer_norm_eps > 0)) {
    return InvalidArgumentError("{}: {} must be positive", at.file, at.Field("layer_norm_eps"));
  }
  return v;
}

StatusOr<std::vector<std::pair<int64_t, int64_t>>> ParsePinpoints(const Json& obj,
                                                                  std::string_view key,
                                                                  const JsonPath& at) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const Json* v = FindField(obj, key);
  if (v == nullptr) return out;
  if (!v->is_array()) {
    return InvalidArgumentError("{}: {}: expected a list of [height, width], got {}", at.file,
                                at.Field(key), JsonTypeName(*v));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& p = (*v)[i];
    const std::string field = fmt::format("{}[{}]", at.Field(key), i);
    if (!p.is_array() || p.size() != 2) {
      return InvalidArgumentError("{}: {}: expected [height, width]", at.file, field);
    }
    FZ_ASSIGN_OR_RETURN(int64_t h, AsInt(p[0], field, at.file));
    FZ_ASSIGN_OR_RETURN(int64_t w, AsInt(p[1], field, at.file));
    if (h <= 0 || w <= 0) {
      return InvalidArgumentError("{}: {}: sizes must be positive", at.file, field);
    }
    out.emplace_back(h, w);
  }
  return out;
}

// OneVision's default grid: (384·i, 384·j) for i, j in 1..6, h-major.
std::vector<std::pair<int64_t, int64_t>> DefaultOneVisionPinpoints() {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 1; i <= 6; ++i)
    for (int64_t j = 1; j <= 6; ++j) out.emplace_back(384 * i, 384 * j);
  return out;
}

// Python's int(s.strip("anyres_max_")): strip any of those characters from both ends.
StatusOr<int64_t> ParseAnyresMax(const std::string& s, const JsonPath& at) {
  constexpr std::string_view kChars = "anyres_max_";
  size_t b = 0, e = s.size();
  while (b < e && kChars.find(s[b]) != std::string_view::npos) ++b;
  while (e > b && kChars.find(s[e - 1]) != std::string_view::npos) --e;
  const std::string digits = s.substr(b, e - b);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
      digits.size() > 6) {
    return InvalidArgumentError("{}: {}: cannot parse '{}' as anyres_max_<N>", at.file,
                                at.Field("vision_aspect_ratio"), s);
  }
  return std::stoll(digits);
}

Status ParseGenerationFields(const Json& obj, const JsonPath& at, GenerationIds& g) {
  FZ_ASSIGN_OR_RETURN(g.bos_token_id, OptionalInt(obj, "bos_token_id", at));
  FZ_ASSIGN_OR_RETURN(g.eos_token_ids, IntOrIntList(obj, "eos_token_id", at));
  FZ_ASSIGN_OR_RETURN(g.pad_token_id, OptionalInt(obj, "pad_token_id", at));
  return absl::OkStatus();
}

}  // namespace

StatusOr<LlavaConfig> ParseLlavaConfig(std::string_view json_text, std::string_view file_name) {
  FZ_ASSIGN_OR_RETURN(Json root, ParseJson(json_text, file_name));
  const JsonPath at{std::string(file_name), ""};
  if (!root.is_object()) {
    return InvalidArgumentError("{}: expected a JSON object, got {}", file_name,
                                JsonTypeName(root));
  }
  // A checkpoint stored quantised: compressed-tensors int8 per channel is loaded; any other
  // method or layout would be misread and is refused, naming it (stored_quantization.h).
  StoredQuantization stored_quantization = StoredQuantization::kNone;
  for (const Json* holder :
       {&root, root.contains("text_config") ? &root["text_config"] : nullptr}) {
    if (holder == nullptr || !holder->is_object() || !holder->contains("quantization_config")) {
      continue;
    }
    FZ_ASSIGN_OR_RETURN(stored_quantization,
                        ParseStoredQuantization((*holder)["quantization_config"], file_name));
  }
  LlavaConfig c;
  c.stored_quantization = stored_quantization;
  FZ_ASSIGN_OR_RETURN(std::optional<std::string> model_type,
                      OptionalString(root, "model_type", at));
  if (!model_type) return InvalidArgumentError("{}: missing required field model_type", file_name);
  c.model_type = *model_type;

  // Per-wrapper defaults (LlavaOnevisionConfig / LlavaConfig / LlavaNextVideoConfig).
  std::string_view text_type, vision_type, select;
  int64_t image_token = -1, video_token = -1, feature_layer = -1;
  if (c.model_type == "llava_onevision") {
    c.arch = LlavaArch::kLlavaOnevision;
    text_type = "qwen2";
    vision_type = "siglip_vision_model";
    image_token = 151646;
    video_token = 151647;
    feature_layer = -1;
    select = "full";
    c.has_image_newline = true;
  } else if (c.model_type == "llava") {
    c.arch = LlavaArch::kLlava;
    text_type = "llama";
    vision_type = "clip_vision_model";
    image_token = 32000;
    feature_layer = -2;
    select = "default";
    c.has_image_newline = false;
  } else if (c.model_type == "llava_next_video") {
    c.arch = LlavaArch::kLlavaNextVideo;
    text_type = "llama";
    vision_type = "clip_vision_model";
    image_token = 32001;
    video_token = 32000;
    feature_layer = -2;
    select = "default";
    c.has_image_newline = true;
  } else {
    return UnimplementedError(
        "{}: model_type '{}' is not supported (llava_onevision, llava, llava_next_video)",
        file_name, c.model_type);
  }

  // Text tower: an absent text_config means the wrapper's class default.
  const Json* text = FindField(root, "text_config");
  if (text != nullptr && !text->is_object()) {
    return InvalidArgumentError("{}: text_config: expected an object, got {}", file_name,
                                JsonTypeName(*text));
  }
  FZ_ASSIGN_OR_RETURN(
      c.text, ParseTextConfig(text ? *text : Json::object(), text_type, at.Child("text_config")));

  // Vision tower: absent -> the wrapper's own default tower (not the tower class's defaults).
  const Json* vision = FindField(root, "vision_config");
  if (vision != nullptr && !vision->is_object()) {
    return InvalidArgumentError("{}: vision_config: expected an object, got {}", file_name,
                                JsonTypeName(*vision));
  }
  Json vision_obj = vision ? *vision : Json::object();
  if (vision == nullptr) {
    if (c.arch == LlavaArch::kLlavaOnevision) {
      vision_obj = {{"model_type", "siglip_vision_model"},
                    {"hidden_size", 1152},
                    {"intermediate_size", 4304},
                    {"patch_size", 14},
                    {"image_size", 384},
                    {"num_hidden_layers", 26},
                    {"num_attention_heads", 16},
                    {"vision_use_head", false}};
    } else {
      vision_obj = {{"model_type", "clip_vision_model"},
                    {"hidden_size", 1024},
                    {"intermediate_size", 4096},
                    {"patch_size", 14},
                    {"image_size", 336},
                    {"num_hidden_layers", 24},
                    {"num_attention_heads", 16}};
    }
  }
  FZ_ASSIGN_OR_RETURN(c.vision,
                      ParseVisionConfig(vision_obj, vision_type, at.Child("vision_config")));

  // Token ids: "image_token_index" (v4) or "image_token_id" (v5 attribute alias).
  FZ_ASSIGN_OR_RETURN(std::optional<int64_t> img, OptionalInt(root, "image_token_index", at));
  if (!img) {
    FZ_ASSIGN_OR_RETURN(img, OptionalInt(root, "image_token_id", at));
  }
  c.image_token_id = img.value_or(image_token);
  FZ_ASSIGN_OR_RETURN(std::optional<int64_t> vid, OptionalInt(root, "video_token_index", at));
  if (!vid) {
    FZ_ASSIGN_OR_RETURN(vid, OptionalInt(root, "video_token_id", at));
  }
  c.video_token_id = vid.value_or(video_token);

  // vision_feature_layer: int or list.
  const Json* vfl = FindField(root, "vision_feature_layer");
  c.vision_feature_layer_is_list = vfl != nullptr && vfl->is_array();
  FZ_ASSIGN_OR_RETURN(c.vision_feature_layers, IntOrIntList(root, "vision_feature_layer", at));
  if (vfl == nullptr) c.vision_feature_layers = {feature_layer};
  if (c.vision_feature_layers.empty()) {
    return InvalidArgumentError("{}: vision_feature_layer: empty list", file_name);
  }
  const int64_t n_states = c.vision.num_hidden_layers + 1;  // embeddings + one per layer
  for (int64_t l : c.vision_feature_layers) {
    if (l < -n_states || l >= n_states) {
      return InvalidArgumentError(
          "{}: vision_feature_layer: {} is out of range for a tower with {} layers", file_name, l,
          c.vision.num_hidden_layers);
    }
  }
  FZ_ASSIGN_OR_RETURN(std::string strategy,
                      StringOr(root, "vision_feature_select_strategy", select, at));
  if (strategy == "full") {
    c.vision_feature_select_strategy = FeatureSelect::kFull;
  } else if (strategy == "default") {
    c.vision_feature_select_strategy = FeatureSelect::kDefault;
  } else {
    return InvalidArgumentError(
        "{}: vision_feature_select_strategy: '{}' is not 'default' or 'full'", file_name, strategy);
  }

  FZ_ASSIGN_OR_RETURN(c.projector_hidden_act,
                      ActivationField(root, "projector_hidden_act", "gelu", at));
  FZ_ASSIGN_OR_RETURN(c.projector_bias, BoolOr(root, "multimodal_projector_bias", true, at));

  FZ_ASSIGN_OR_RETURN(c.image_grid_pinpoints, ParsePinpoints(root, "image_grid_pinpoints", at));
  if (c.image_grid_pinpoints.empty() && FindField(root, "image_grid_pinpoints") == nullptr) {
    if (c.arch == LlavaArch::kLlavaOnevision) {
      c.image_grid_pinpoints = DefaultOneVisionPinpoints();
    } else if (c.arch == LlavaArch::kLlavaNextVideo) {
      c.image_grid_pinpoints = {{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}};
    }
  }
  if (c.arch == LlavaArch::kLlavaOnevision) {
    FZ_ASSIGN_OR_RETURN(c.vision_aspect_ratio,
                        StringOr(root, "vision_aspect_ratio", "anyres_max_9", at));
    FZ_ASSIGN_OR_RETURN(c.anyres_max_tiles, ParseAnyresMax(c.vision_aspect_ratio, at));
  }
  if (c.arch == LlavaArch::kLlavaNextVideo) {
    FZ_ASSIGN_OR_RETURN(c.spatial_pool_mode, StringOr(root, "spatial_pool_mode", "average", at));
    FZ_ASSIGN_OR_RETURN(c.spatial_pool_stride, IntOr(root, "spatial_pool_stride", 2, at));
    if (c.spatial_pool_mode != "average" && c.spatial_pool_mode != "max") {
      return InvalidArgumentError("{}: spatial_pool_mode: '{}' is not 'average' or 'max'",
                                  file_name, c.spatial_pool_mode);
    }
    FZ_RETURN_IF_ERROR(RequirePositive(c.spatial_pool_stride, "spatial_pool_stride", at));
  }

  // Tying (docs/models.md §1.1): text_config decides; v5 also honours a top-level true.
  FZ_ASSIGN_OR_RETURN(bool top_tie, BoolOr(root, "tie_word_embeddings", false, at));
  c.tie_word_embeddings = c.text.tie_word_embeddings || top_tie;

  FZ_ASSIGN_OR_RETURN(std::optional<std::string> dtype, OptionalString(root, "torch_dtype", at));
  if (!dtype) {
    FZ_ASSIGN_OR_RETURN(dtype, OptionalString(root, "dtype", at));
  }
  c.torch_dtype = dtype.value_or("");

  // Special ids here are a fallback; LoadLlavaConfig prefers generation_config.json.
  FZ_RETURN_IF_ERROR(ParseGenerationFields(root, at, c.generation));
  if (!c.generation.bos_token_id) c.generation.bos_token_id = c.text.bos_token_id;
  if (c.generation.eos_token_ids.empty() && c.text.eos_token_id) {
    c.generation.eos_token_ids = {*c.text.eos_token_id};
  }
  if (!c.generation.pad_token_id) c.generation.pad_token_id = c.text.pad_token_id;

  // Placeholder ids may equal vocab_size (LLaVA-1.5's class default 32000 with a 32000-row
  // Llama): the engine never gathers embedding rows for placeholder positions. Only reject
  // values that cannot be ids at all.
  for (auto [name, id] :
       {std::pair<std::string_view, int64_t>{"image_token_index", c.image_token_id},
        {"video_token_index", c.video_token_id}}) {
    if (id < -1) return InvalidArgumentError("{}: {} {} is negative", file_name, name, id);
  }
  return c;
}

StatusOr<GenerationIds> ParseGenerationConfig(std::string_view json_text,
                                              std::string_view file_name) {
  FZ_ASSIGN_OR_RETURN(Json root, ParseJson(json_text, file_name));
  if (!root.is_object()) {
    return InvalidArgumentError("{}: expected a JSON object, got {}", file_name,
                                JsonTypeName(root));
  }
  GenerationIds g;
  FZ_RETURN_IF_ERROR(ParseGenerationFields(root, JsonPath{std::string(file_name), ""}, g));
  return g;
}

StatusOr<LlavaConfig> LoadLlavaConfig(const std::filesystem::path& dir) {
  FZ_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir / "config.json"));
  FZ_ASSIGN_OR_RETURN(LlavaConfig c, ParseLlavaConfig(text, "config.json"));
  const auto gen_path = dir / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(gen_path, ec)) {
    FZ_ASSIGN_OR_RETURN(std::string gen_text, ReadFileToString(gen_path));
    FZ_ASSIGN_OR_RETURN(GenerationIds g, ParseGenerationConfig(gen_text));
    // generate() uses generation_config; keys it lacks fall back to the model config's.
    if (g.bos_token_id) c.generation.bos_token_id = g.bos_token_id;
    if (!g.eos_token_ids.empty()) c.generation.eos_token_ids = g.eos_token_ids;
    if (g.pad_token_id) c.generation.pad_token_id = g.pad_token_id;
  }
  return c;
}

namespace {

// Reads {"height","width"} / {"shortest_edge"} / a bare int (old files) into h, w, shortest.
Status ParseSize(const Json& obj, std::string_view key, const JsonPath& at, int64_t& h, int64_t& w,
                 int64_t* shortest) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return absl::OkStatus();
  if (v->is_number()) {
    FZ_ASSIGN_OR_RETURN(int64_t s, AsInt(*v, at.Field(key), at.file));
    if (shortest != nullptr) {
      *shortest = s;
      h = w = 0;
    } else {
      h = w = s;
    }
    return absl::OkStatus();
  }
  if (!v->is_object()) {
    return InvalidArgumentError("{}: {}: expected an object or integer, got {}", at.file,
                                at.Field(key), JsonTypeName(*v));
  }
  const JsonPath sat = at.Child(key);
  FZ_ASSIGN_OR_RETURN(std::optional<int64_t> hh, OptionalInt(*v, "height", sat));
  FZ_ASSIGN_OR_RETURN(std::optional<int64_t> ww, OptionalInt(*v, "width", sat));
  FZ_ASSIGN_OR_RETURN(std::optional<int64_t> se, OptionalInt(*v, "shortest_edge", sat));
  if (hh && ww) {
    h = *hh;
    w = *ww;
    if (shortest != nullptr) *shortest = 0;
  } else if (se && shortest != nullptr) {
    *shortest = *se;
    h = w = 0;
  } else {
    return InvalidArgumentError("{}: {}: expected height and width{}", at.file, at.Field(key),
                                shortest != nullptr ? " or shortest_edge" : "");
  }
  return absl::OkStatus();
}

StatusOr<std::vector<double>> ParseTriple(const Json& obj, std::string_view key,
                                          const std::vector<double>& fallback, const JsonPath& at) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return fallback;
  std::vector<double> out;
  if (v->is_number()) {  // a scalar applies to every channel
    FZ_ASSIGN_OR_RETURN(double x, AsDouble(*v, at.Field(key), at.file));
    return std::vector<double>(3, x);
  }
  if (!v->is_array() || v->size() != 3) {
    return InvalidArgumentError("{}: {}: expected 3 numbers", at.file, at.Field(key));
  }
  for (size_t i = 0; i < 3; ++i) {
    FZ_ASSIGN_OR_RETURN(double x,
                        AsDouble((*v)[i], fmt::format("{}[{}]", at.Field(key), i), at.file));
    out.push_back(x);
  }
  return out;
}

}  // namespace

StatusOr<PreprocessorConfig> ParsePreprocessorConfig(std::string_view json_text,
                                                     std::string_view file_name) {
  FZ_ASSIGN_OR_RETURN(Json root, ParseJson(json_text, file_name));
  if (!root.is_object()) {
    return InvalidArgumentError("{}: expected a JSON object, got {}", file_name,
                                JsonTypeName(root));
  }
  const JsonPath at{std::string(file_name), ""};
  PreprocessorConfig p;
  FZ_ASSIGN_OR_RETURN(p.image_processor_type, StringOr(root, "image_processor_type", "", at));
  // Class defaults by processor type (LlavaOnevision / Siglip: fixed square; CLIP / LlavaNext:
  // shortest edge + center crop).
  const std::string& type = p.image_processor_type;
  const bool onevision = type.rfind("LlavaOnevision", 0) == 0;
  const bool siglip = type.rfind("Siglip", 0) == 0;
  if (onevision || siglip) {
    p.size_height = p.size_width = onevision ? 384 : 224;
    p.do_pad = onevision;
    if (onevision) p.image_grid_pinpoints = DefaultOneVisionPinpoints();
    if (siglip) p.image_mean = p.image_std = {0.5, 0.5, 0.5};
  } else {
    p.size_shortest_edge = 224;
    p.do_center_crop = true;
    p.crop_height = p.crop_width = 224;
    p.do_pad = type.rfind("LlavaNext", 0) == 0;
  }
  FZ_ASSIGN_OR_RETURN(p.do_resize, BoolOr(root, "do_resize", p.do_resize, at));
  FZ_RETURN_IF_ERROR(
      ParseSize(root, "size", at, p.size_height, p.size_width, &p.size_shortest_edge));
  FZ_ASSIGN_OR_RETURN(int64_t resample, IntOr(root, "resample", p.resample, at));
  if (resample < 0 || resample > 5) {
    return InvalidArgumentError("{}: resample: {} is not a PIL filter code", file_name, resample);
  }
  p.resample = static_cast<int>(resample);
  FZ_ASSIGN_OR_RETURN(p.do_rescale, BoolOr(root, "do_rescale", p.do_rescale, at));
  FZ_ASSIGN_OR_RETURN(p.rescale_factor, DoubleOr(root, "rescale_factor", p.rescale_factor, at));
  FZ_ASSIGN_OR_RETURN(p.do_normalize, BoolOr(root, "do_normalize", p.do_normalize, at));
  FZ_ASSIGN_OR_RETURN(p.image_mean, ParseTriple(root, "image_mean", p.image_mean, at));
  FZ_ASSIGN_OR_RETURN(p.image_std, ParseTriple(root, "image_std", p.image_std, at));
  for (double s : p.image_std) {
    if (!(s != 0)) return InvalidArgumentError("{}: image_std contains 0", file_name);
  }
  FZ_ASSIGN_OR_RETURN(p.do_convert_rgb, BoolOr(root, "do_convert_rgb", p.do_convert_rgb, at));
  FZ_ASSIGN_OR_RETURN(p.do_center_crop, BoolOr(root, "do_center_crop", p.do_center_crop, at));
  FZ_RETURN_IF_ERROR(ParseSize(root, "crop_size", at, p.crop_height, p.crop_width, nullptr));
  FZ_ASSIGN_OR_RETURN(p.do_pad, BoolOr(root, "do_pad", p.do_pad, at));
  if (FindField(root, "image_grid_pinpoints") != nullptr) {
    FZ_ASSIGN_OR_RETURN(p.image_grid_pinpoints, ParsePinpoints(root, "image_grid_pinpoints", at));
  }
  if (p.do_resize && p.size_shortest_edge <= 0 && (p.size_height <= 0 || p.size_width <= 0)) {
    return InvalidArgumentError("{}: size must be positive", file_name);
  }
  return p;
}

StatusOr<PreprocessorConfig> LoadPreprocessorConfig(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir / "preprocessor_config.json", ec) &&
      std::filesystem::exists(dir / "processor_config.json", ec)) {
    // transformers 5 may save only processor_config.json, with the image processor nested.
    FZ_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir / "processor_config.json"));
    FZ_ASSIGN_OR_RETURN(Json root, ParseJson(text, "processor_config.json"));
    const Json* image = FindField(root, "image_processor");
    if (image == nullptr || !image->is_object()) {
      return NotFoundError(
          "{}: no preprocessor_config.json and no image_processor in "
          "processor_config.json",
          dir.string());
    }
    return ParsePreprocessorConfig(image->dump(), "processor_config.json: image_processor");
  }
  FZ_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir / "preprocessor_config.json"));
  return ParsePreprocessorConfig(text, "preprocessor_config.json");
}

}  // namespace framezip::engine::model
