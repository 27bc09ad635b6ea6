// Model configuration read from a Hugging Face model directory: config.json (LLaVA wrapper with a
// text_config and a vision_config), generation_config.json / tokenizer_config.json (special token
// ids) and preprocessor_config.json (image normalisation).
//
// Contract (docs/models.md §1.1, §3, §4):
// - Every field the forward pass needs is resolved here, with the published transformers class
//   default when config.json leaves it out, so engine code never looks at JSON.
// - Supported wrappers: model_type "llava_onevision" (full), "llava" and "llava_next_video"
//   (same towers and projector; the differences are the defaults listed in config.cc).
//   Text: "qwen2" or "llama". Vision: "siglip_vision_model" or "clip_vision_model".
//   Anything else is UNIMPLEMENTED with the offending model_type named.
// - Invalid values (missing required field, wrong JSON type, hidden not divisible by heads, ...)
//   are INVALID_ARGUMENT naming the file and the field ("config.json: text_config.hidden_size:
//   expected an integer, got string").
// - The structs are plain values: cheap to copy, no hidden state, safe to share between threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace framezip::engine::model {

// Activation functions named by hidden_act / projector_hidden_act.
enum class Activation {
  kSilu,       // "silu", "swish": x * sigmoid(x)
  kGeluErf,    // "gelu": 0.5 x (1 + erf(x / sqrt 2)) (exact)
  kGeluTanh,   // "gelu_pytorch_tanh", "gelu_new", "gelu_fast": tanh approximation
  kQuickGelu,  // "quick_gelu": x * sigmoid(1.702 x)
  kRelu,       // "relu"
};
// Maps an HF activation name; UNIMPLEMENTED naming it when unknown.
StatusOr<Activation> ParseActivation(std::string_view name);
// The canonical HF name (inline: the vision tower uses it without linking the config parser).
inline std::string_view ActivationName(Activation act) {
  switch (act) {
    case Activation::kSilu:
      return "silu";
    case Activation::kGeluErf:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_pytorch_tanh";
    case Activation::kQuickGelu:
      return "quick_gelu";
    case Activation::kRelu:
      return "relu";
  }
  return "?";
}

enum class TextArch { kQwen2, kLlama };
enum class VisionArch { kSiglip, kClip };
enum class LlavaArch { kLlavaOnevision, kLlava, kLlavaNextVideo };

// RoPE frequency scaling (rope_scaling / rope_parameters). kDefault = plain 1/theta^(2i/d).
struct RopeScaling {
  enum class Type { kDefault, kLinear, kLlama3 };
  Type type = Type::kDefault;
  double factor = 1.0;                              // linear, llama3
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

// Decoder LLM (Qwen2 / Llama). Shapes of the weights follow from these fields (weights.h).
struct TextConfig {
  TextArch arch = TextArch::kQwen2;
  std::string model_type;  // "qwen2" / "llama" as written in config.json
  int64_t vocab_size = 0;  // rows of embed_tokens and lm_head (logit count)
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // GQA: query head h uses KV head h / (heads / kv_heads)
  int64_t head_dim = 0;             // config.head_dim or hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  Activation hidden_act = Activation::kSilu;  // MLP: down(act(gate(x)) * up(x))
  bool qkv_bias = false;  // q/k/v_proj have a bias (Qwen2 always; Llama iff attention_bias)
  bool o_bias = false;    // o_proj has a bias (Llama iff attention_bias; never Qwen2)
  bool mlp_bias = false;  // gate/up/down have a bias (Llama mlp_bias)
  bool tie_word_embeddings = false;  // as written in text_config (see LlavaConfig for the rule)
  // Sliding-window attention is used only when use_sliding_window is true (Qwen2); OV: false.
  bool use_sliding_window = false;
  int64_t sliding_window = 0;
  int64_t max_window_layers = 0;
  // Token ids the text config itself carries (may be absent).
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;
  std::optional<int64_t> pad_token_id;

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
};

// Vision tower (SigLIP / CLIP ViT).
struct VisionConfig {
  VisionArch arch = VisionArch::kSiglip;
  std::string model_type;  // "siglip_vision_model" / "clip_vision_model"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads
  int64_t num_channels = 3;
  int64_t image_size = 0;  // square input side in pixels (384 for OV)
  int64_t patch_size = 0;  // conv kernel = stride (14 for OV); trailing pixels are ignored
  double layer_norm_eps = 1e-6;
  Activation hidden_act = Activation::kGeluTanh;
  bool vision_use_head = false;  // SigLIP pooling head (unused by LLaVA; weights optional)

  int64_t patches_per_side() const { return image_size / patch_size; }
  int64_t num_patches() const { return patches_per_side() * patches_per_side(); }
  // CLIP prepends a class token: positions = patches + 1. SigLIP: positions = patches.
  bool has_class_embedding() const { return arch == VisionArch::kClip; }
  int64_t num_positions() const { return num_patches() + (has_class_embedding() ? 1 : 0); }
  bool patch_embedding_bias() const { return arch == VisionArch::kSiglip; }
  bool has_pre_layernorm() const { return arch == VisionArch::kClip; }  // CLIP "pre_layrnorm"
};

// vision_feature_select_strategy: "full" keeps every token; "default" drops token 0 (CLS).
enum class FeatureSelect { kFull, kDefault };

// Special-token ids from generation_config.json (falling back to config.json / text_config).
struct GenerationIds {
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // generation stops on any of these (int or list in JSON)
  std::optional<int64_t> pad_token_id;
};

// The whole model: LLaVA wrapper + towers.
// How a checkpoint stores its Linears' weights (config.json's quantization_config, parsed by
// stored_quantization.h).
enum class StoredQuantization {
  kNone,            // f32 / f16 / bf16
  kInt8PerChannel,  // compressed-tensors int8 weights with one scale per output channel
  kFp8PerChannel,   // compressed-tensors FP8 E4M3 weights, one scale per channel (or tensor)
};

struct LlavaConfig {
  LlavaArch arch = LlavaArch::kLlavaOnevision;
  std::string model_type;  // as written in config.json
  TextConfig text;
  VisionConfig vision;

  int64_t image_token_id = -1;  // -1 when the model has none
  int64_t video_token_id = -1;
  // Indices into the vision tower's hidden_states tuple (0 = embeddings, k = output of layer k-1;
  // negative counts from the end, -1 = last layer output WITHOUT post_layernorm). More than one:
  // features are concatenated on the last dim.
  std::vector<int64_t> vision_feature_layers = {-1};
  bool vision_feature_layer_is_list = false;
  FeatureSelect vision_feature_select_strategy = FeatureSelect::kFull;

  // Projector: linear_2(act(linear_1(x))); input width = vision hidden * #feature layers.
  Activation projector_hidden_act = Activation::kGeluErf;
  bool projector_bias = true;
  bool has_image_newline = true;  // llava_onevision / llava_next_video: image_newline [H]

  // Anyres (OV, NeXT): candidate canvases as (height, width) pairs, in file order.
  std::vector<std::pair<int64_t, int64_t>> image_grid_pinpoints;
  std::string vision_aspect_ratio;  // "anyres_max_9"
  int64_t anyres_max_tiles = 9;     // parsed from vision_aspect_ratio
  // llava_next_video spatial pooling of video features ("average" / "max", stride).
  std::string spatial_pool_mode;
  int64_t spatial_pool_stride = 0;

  // docs/models.md §1.1: the head is tied iff text_config.tie_word_embeddings is true (v4 reads the
  // text config; v5 forwards it to the top level). A top-level true also ties (v5 semantics).
  bool tie_word_embeddings = false;
  std::string torch_dtype;  // "float16", "bfloat16", ... (informational; weights carry dtype)
  // How the checkpoint stores its Linears' weights (quantization_config; stored_quantization.h).
  StoredQuantization stored_quantization = StoredQuantization::kNone;

  GenerationIds generation;

  int64_t projector_input_dim() const {
    return vision.hidden_size * static_cast<int64_t>(vision_feature_layers.size());
  }
};

// Image preprocessing constants (preprocessor_config.json), docs/models.md §2.1.
struct PreprocessorConfig {
  std::string image_processor_type;  // "LlavaOnevisionImageProcessor", "CLIPImageProcessor", ...
  bool do_resize = true;
  // Exactly one of (height, width) or shortest_edge is set (> 0).
  int64_t size_height = 0;
  int64_t size_width = 0;
  int64_t size_shortest_edge = 0;
  int resample = 3;  // PIL code: 0 nearest, 2 bilinear, 3 bicubic
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::vector<double> image_mean = {0.48145466, 0.4578275, 0.40821073};  // OPENAI CLIP defaults
  std::vector<double> image_std = {0.26862954, 0.26130258, 0.27577711};
  bool do_convert_rgb = true;
  bool do_center_crop = false;
  int64_t crop_height = 0;
  int64_t crop_width = 0;
  bool do_pad = false;
  std::vector<std::pair<int64_t, int64_t>> image_grid_pinpoints;  // (height, width)
};

// Parses config.json text (`file_name` is used in messages only). Does not read other files.
StatusOr<LlavaConfig> ParseLlavaConfig(std::string_view json_text,
                                       std::string_view file_name = "config.json");

// Loads `dir`/config.json and, when present, fills `generation` from generation_config.json
// (else from config.json / text_config ids).
StatusOr<LlavaConfig> LoadLlavaConfig(const std::filesystem::path& dir);

// Parses preprocessor_config.json text. LoadPreprocessorConfig reads
// `dir`/preprocessor_config.json, or the "image_processor" object of `dir`/processor_config.json
// (transformers 5) when the former is absent.
StatusOr<PreprocessorConfig> ParsePreprocessorConfig(
    std::string_view json_text, std::string_view file_name = "preprocessor_config.json");
StatusOr<PreprocessorConfig> LoadPreprocessorConfig(const std::filesystem::path& dir);

// Parses generation_config.json text into ids (missing keys stay unset / empty).
StatusOr<GenerationIds> ParseGenerationConfig(
    std::string_view json_text, std::string_view file_name = "generation_config.json");

// Reads a whole file; NOT_FOUND naming the path when it does not exist.
StatusOr<std::string> ReadFileToString(const std::filesystem::path& path);

}  // namespace framezip::engine::model
