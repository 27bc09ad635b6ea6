// Weight binding: maps the tensors of a model directory onto the canonical names of the module
// tree of LlavaOnevisionForConditionalGeneration (docs/models.md §5), checking them against config.
//
// Canonical names (docs/models.md §5.2, the module tree of transformers ≥ 4.52):
//   model.language_model.{embed_tokens.weight, layers.N.*, norm.weight}, lm_head.weight,
//   model.vision_tower.vision_model.{embeddings.*, pre_layrnorm.*, encoder.layers.N.*,
//   post_layernorm.*}, model.multi_modal_projector.linear_{1,2}.{weight,bias}, model.image_newline.
// Stored names may use any layout transformers has written; they are rewritten on load (first
// match wins): ^model.vision_tower(.vision_model)? and ^vision_tower(.vision_model)? ->
// model.vision_tower.vision_model, ^language_model.model -> model.language_model,
// ^language_model.lm_head -> lm_head, ^language_model -> model.language_model,
// ^multi_modal_projector -> model.multi_modal_projector, ^image_newline -> model.image_newline
// (transformers 5.x writes "vision_tower.embeddings.*" without the vision_model level, hub
// checkpoints "vision_tower.vision_model.*"). *.rotary_emb.inv_freq is
// ignored. Unused extra tensors (e.g. a SigLIP head) are kept but not required.
//
// Validation (Bind): every expected tensor exists, has a float dtype (F32/F16/BF16; I8 or F8_E4M3
// for the decoder's projections of a compressed-tensors checkpoint, stored_quantization.h) and
// the shape the config implies. The first problem is returned as INVALID_ARGUMENT naming the
// canonical tensor: "missing tensor model.language_model.layers.3.self_attn.q_proj.weight", "tensor
// X has shape [a, b], expected [c, d]". Tying (docs/models.md §1.1, §5.3): when
// config.tie_word_embeddings, lm_head.weight IS embed_tokens.weight (a stored lm_head tensor is
// ignored).
//
// Tensors stay in their stored dtype and are zero-copy views over the mmapped files (see
// safetensors.h), except an FP8 checkpoint's projections, decoded to owned bf16 tensors (the CPU
// has no FP8 arithmetic); copying ModelWeights is cheap. Thread-safe for concurrent const use.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"

namespace framezip::engine::model {

// Canonical name prefixes.
inline constexpr std::string_view kTextPrefix = "model.language_model.";
inline constexpr std::string_view kVisionPrefix = "model.vision_tower.vision_model.";
inline constexpr std::string_view kProjectorPrefix = "model.multi_modal_projector.";
inline constexpr std::string_view kImageNewline = "model.image_newline";
inline constexpr std::string_view kLmHead = "lm_head.weight";

// "model.language_model.layers.<layer>.<suffix>", e.g. TextLayerName(3, "self_attn.q_proj.weight").
std::string TextLayerName(int64_t layer, std::string_view suffix);
// "model.language_model.<suffix>", e.g. TextName("embed_tokens.weight").
std::string TextName(std::string_view suffix);
// "model.vision_tower.vision_model.encoder.layers.<layer>.<suffix>".
std::string VisionLayerName(int64_t layer, std::string_view suffix);
// "model.vision_tower.vision_model.<suffix>", e.g. VisionName("embeddings.patch_embedding.weight").
std::string VisionName(std::string_view suffix);
// "model.multi_modal_projector.<suffix>".
std::string ProjectorName(std::string_view suffix);

// Rewrites a stored (legacy or new) key to its canonical name; unknown prefixes pass through.
std::string CanonicalName(std::string_view stored_name);

// One tensor the config requires (or allows).
struct ExpectedTensor {
  std::string name;  // canonical
  Shape shape;
  bool required = true;  // false: checked only if present (post_layernorm, a tied lm_head)
  // One of the decoder's seven projections: int8 in a compressed-tensors checkpoint
  // (stored_quantization.h), with its scales bound as `<name>_scale`, f32 [N].
  bool decoder_projection = false;
};
// Every tensor the forward pass of `config` needs, in module order.
std::vector<ExpectedTensor> ExpectedTensors(const LlavaConfig& config);

// Per-layer views. Bias tensors are undefined (!defined()) when the config has no bias.
struct TextLayerWeights {
  Tensor input_layernorm;           // [H]
  Tensor q_proj, q_bias;            // [nH·d, H], [nH·d]
  Tensor k_proj, k_bias;            // [nKV·d, H], [nKV·d]
  Tensor v_proj, v_bias;            // [nKV·d, H], [nKV·d]
  Tensor o_proj, o_bias;            // [H, nH·d], [H]
  Tensor post_attention_layernorm;  // [H]
  Tensor gate_proj, gate_bias;      // [I, H], [I]
  Tensor up_proj, up_bias;          // [I, H], [I]
  Tensor down_proj, down_bias;      // [H, I], [H]
};
struct VisionLayerWeights {
  Tensor layer_norm1_weight, layer_norm1_bias;                                // [D]
  Tensor q_proj, q_bias, k_proj, k_bias, v_proj, v_bias, out_proj, out_bias;  // [D, D], [D]
  Tensor layer_norm2_weight, layer_norm2_bias;                                // [D]
  Tensor fc1, fc1_bias;                                                       // [Iv, D], [Iv]
  Tensor fc2, fc2_bias;                                                       // [D, Iv], [D]
};

enum class KeyScheme { kLegacy, kCurrent, kMixed };

class ModelWeights {
 public:
  ModelWeights() = default;

  // Opens the safetensors of `dir` (SafetensorsModel::Open) and binds them to `config`.
  static StatusOr<ModelWeights> Load(const std::filesystem::path& dir, const LlavaConfig& config);
  // Binds already-opened tensors to `config`, validating names, dtypes and shapes.
  static StatusOr<ModelWeights> Bind(const LlavaConfig& config, const SafetensorsModel& files);

  // The tensor with this canonical name. Asking for a name Bind did not validate is a programming
  // error (FZ_CHECK); use Has()/Find() for optional tensors.
  const Tensor& Get(std::string_view canonical_name) const;
  bool Has(std::string_view canonical_name) const;
  const Tensor* Find(std::string_view canonical_name) const;  // nullptr if absent

  TextLayerWeights TextLayer(int64_t layer) const;
  VisionLayerWeights VisionLayer(int64_t layer) const;

  // dtype of embed_tokens (the model's working dtype).
  DType dtype() const { return dtype_; }
  KeyScheme scheme() const { return scheme_; }
  size_t size() const { return tensors_.size(); }
  // Canonical names held, sorted.
  std::vector<std::string> Names() const;
  // Stored key of a canonical name ("" if absent or synthesized by tying; an FP8 checkpoint's
  // scales, consumed at load, have a stored key but no tensor).
  std::string StoredName(std::string_view canonical_name) const;

 private:
  static Status BindQuantized(
      const ExpectedTensor& e, const std::string& stored, Tensor weight,
      const std::map<std::string, std::string, std::less<>>& canonical_to_stored,
      const SafetensorsModel& files, ModelWeights& w);

  std::map<std::string, Tensor, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> stored_names_;
  DType dtype_ = DType::kF32;
  KeyScheme scheme_ = KeyScheme::kCurrent;
};

}  // namespace framezip::engine::model
