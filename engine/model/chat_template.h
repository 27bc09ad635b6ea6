// Chat templates and visual-placeholder expansion (docs/models.md §2.3, §2.4).
//
// There is no Jinja engine here: a model's template source (chat_template.jinja,
// chat_template.json or tokenizer_config.json "chat_template") is RECOGNISED by comparing it,
// whitespace-insensitively outside string literals, with the templates we implement, and rendered
// natively, byte-identical to transformers' apply_chat_template. Known templates:
//   kLlavaOnevision  llava-hf OneVision (convert_llava_onevision_weights_to_hf.py): per message
//                    "<|im_start|>{role}\n", one "<image>\n" per image item, one "<video>\n" per
//                    video item, the text items concatenated, "<|im_end|>\n"; no default system.
//   kQwen2Instruct   Qwen2-Instruct ChatML: default system "You are a helpful assistant." when the
//                    first message is not a system one; text-only.
//   kChatML          plain ChatML without a default system message; text-only.
// Anything else is UNIMPLEMENTED naming the template (its first line). add_generation_prompt
// appends "<|im_start|>assistant\n" for all three.
//
// Expansion: the processor replaces each "<image>" by N copies of itself (N from the original
// image size: anyres tiles + unpadding + newlines, or 730 for images of a multi-image sample) and
// each "<video>" by F·ceil(g/2)²+1 copies; the copies are then tokenized as the single added
// token. All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/model/config.h"

namespace framezip::engine::model {

struct ChatContent {
  enum class Type { kText, kImage, kVideo };
  Type type = Type::kText;
  std::string text;  // kText only

  static ChatContent Text(std::string t) { return {Type::kText, std::move(t)}; }
  static ChatContent Image() { return {Type::kImage, {}}; }
  static ChatContent Video() { return {Type::kVideo, {}}; }
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::vector<ChatContent> content;
};

enum class ChatTemplateKind { kLlavaOnevision, kQwen2Instruct, kChatML };
std::string_view ChatTemplateKindName(ChatTemplateKind kind);

class ChatTemplate {
 public:
  // Recognises a Jinja template source; UNIMPLEMENTED naming it when unknown.
  static StatusOr<ChatTemplate> FromSource(std::string_view source);
  // The template of a model directory, looked up like a transformers processor does:
  // chat_template.jinja, else chat_template.json {"chat_template": ...}, else
  // tokenizer_config.json "chat_template" (a string, or a list of {name, template} where the
  // one named "default" is used). NOT_FOUND when none exists.
  static StatusOr<ChatTemplate> Load(const std::filesystem::path& dir);
  // A template by kind (for tests and models without a template file).
  static ChatTemplate OfKind(ChatTemplateKind kind) { return ChatTemplate(kind); }

  // The prompt transformers renders for `messages`. INVALID_ARGUMENT for an image/video item
  // in a text-only template, or an empty role.
  StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                               bool add_generation_prompt) const;

  ChatTemplateKind kind() const { return kind_; }

 private:
  explicit ChatTemplate(ChatTemplateKind kind) : kind_(kind) {}
  ChatTemplateKind kind_;
};

// The exact template sources we recognise (the llava-hf OneVision template, verbatim).
std::string_view KnownChatTemplateSource(ChatTemplateKind kind);

// How many placeholder tokens the processor puts for each image / video.
struct VisualTokenLayout {
  // Anyres (OneVision): tiles of tile_size px, tokens_per_tile = (image_size/patch_size)².
  bool anyres = true;
  int64_t tile_size = 384;                             // processor size (height == width)
  int64_t tokens_per_tile = 729;                       // processor num_image_tokens
  std::vector<std::pair<int64_t, int64_t>> pinpoints;  // (height, width)
  int64_t anyres_max_tiles = 9;
  bool drop_cls = false;  // vision_feature_select_strategy "default": one token fewer per image
  // Plain LLaVA: every image is `fixed_image_tokens` tokens.
  int64_t fixed_image_tokens = 0;

  // The layout of `config` (+ preprocessor size): OV anyres with config pinpoints, or LLaVA's
  // fixed (image/patch)² (+1 CLS −1 for "default").
  static VisualTokenLayout ForModel(const LlavaConfig& config, const PreprocessorConfig& pre);
};

// Placeholder tokens for one image of original size (height, width); `multi_image_sample` when
// its prompt has several images given as a nested list (single-tile path: tokens_per_tile + 1).
int64_t NumImageTokens(const VisualTokenLayout& layout, int64_t height, int64_t width,
                       bool multi_image_sample = false);
// Placeholder tokens for one video of `num_frames` frames: F·ceil(sqrt(tokens_per_tile)/2)² + 1.
int64_t NumVideoTokens(const VisualTokenLayout& layout, int64_t num_frames);

// Replaces the k-th `image_token` occurrence by image_token_counts[k] copies and the k-th
// `video_token` by video_token_counts[k] copies. INVALID_ARGUMENT if the counts of occurrences
// and of entries differ.
StatusOr<std::string> ExpandVisualPlaceholders(std::string_view prompt,
                                               std::span<const int64_t> image_token_counts,
                                               std::span<const int64_t> video_token_counts,
                                               std::string_view image_token = "<image>",
                                               std::string_view video_token = "<video>");

}  // namespace framezip::engine::model
