#include "engine/model/chat_template.h"

#include <cmath>

#include "common/anyres_canvas.h"
#include "engine/model/json_util.h"

namespace framezip::engine::model {

namespace {

constexpr std::string_view kOneVisionSource =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', "
    "'equalto', 'image') %}{{ '<image>\\n' }}{% endfor %}{# Render all video then #}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
    "{{ '<video>\\n' }}{% endfor %}{# Render all text next #}{% if message['role'] != "
    "'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', "
    "'text') %}{{ content['text'] }}{% endfor %}{% else %}{% for content in message['content'] "
    "| selectattr('type', 'equalto', 'text') %}{% generation %}{{ content['text'] }}"
    "{% endgeneration %}{% endfor %}{% endif %}{{'<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

constexpr std::string_view kQwen2InstructSource =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

constexpr std::string_view kChatMLSource =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Drops whitespace outside '...' / "..." literals so formatting differences do not matter but
// any change to rendered text does.
std::string Canonicalize(std::string_view src) {
  std::string out;
  char quote = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    const char c = src[i];
    if (quote != 0) {
      // Jinja reads the escape '\\n' and a literal newline inside a string the same way (the
      // transformers 5 chat_template.jinja files carry literal newlines): compare them as one.
      if (c == '\\' && i + 1 < src.size() && src[i + 1] == 'n') {
        out.push_back('\n');
        ++i;
        continue;
      }
      out.push_back(c);
      if (c == '\\' && i + 1 < src.size()) {
        out.push_back(src[++i]);
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      out.push_back(c);
    } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      out.push_back(c);
    }
  }
  return out;
}

std::string FirstLine(std::string_view s) {
  std::string line(s.substr(0, s.find('\n')));
  if (line.size() > 120) line = line.substr(0, 120) + "...";
  return line;
}

}  // namespace

std::string_view ChatTemplateKindName(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kLlavaOnevision:
      return "llava_onevision";
    case ChatTemplateKind::kQwen2Instruct:
      return "qwen2_instruct";
    case ChatTemplateKind::kChatML:
      return "chatml";
  }
  return "?";
}

std::string_view KnownChatTemplateSource(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kLlavaOnevision:
      return kOneVisionSource;
    case ChatTemplateKind::kQwen2Instruct:
      return kQwen2InstructSource;
    case ChatTemplateKind::kChatML:
      return kChatMLSource;
  }
  return {};
}

StatusOr<ChatTemplate> ChatTemplate::FromSource(std::string_view source) {
  const std::string canon = Canonicalize(source);
  for (ChatTemplateKind kind : {ChatTemplateKind::kLlavaOnevision, ChatTemplateKind::kQwen2Instruct,
                                ChatTemplateKind::kChatML}) {
    if (canon == Canonicalize(KnownChatTemplateSource(kind))) return ChatTemplate(kind);
  }
  return UnimplementedError(
      "chat template is not supported (known: llava_onevision, qwen2_instruct, chatml): '{}'",
      FirstLine(source));
}

StatusOr<ChatTemplate> ChatTemplate::Load(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir / "chat_template.jinja", ec)) {
    FZ_ASSIGN_OR_RETURN(std::string src, ReadFileToString(dir / "chat_template.jinja"));
    return FromSource(src);
  }
  if (std::filesystem::exists(dir / "chat_template.json", ec)) {
    FZ_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir / "chat_template.json"));
    FZ_ASSIGN_OR_RETURN(Json j, ParseJson(text, "chat_template.json"));
    const Json* t = FindField(j, "chat_template");
    if (t == nullptr || !t->is_string()) {
      return InvalidArgumentError("chat_template.json: chat_template: expected a string");
    }
    return FromSource(t->get<std::string>());
  }
  FZ_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir / "tokenizer_config.json"));
  FZ_ASSIGN_OR_RETURN(Json j, ParseJson(text, "tokenizer_config.json"));
  const Json* t = FindField(j, "chat_template");
  if (t == nullptr) {
    return NotFoundError(
        "no chat template in {} (chat_template.jinja, chat_template.json or "
        "tokenizer_config.json)",
        dir.string());
  }
  if (t->is_string()) return FromSource(t->get<std::string>());
  if (t->is_array()) {
    for (const Json& e : *t) {
      const Json* name = FindField(e, "name");
      const Json* tmpl = FindField(e, "template");
      if (name != nullptr && name->is_string() && name->get<std::string>() == "default" &&
          tmpl != nullptr && tmpl->is_string()) {
        return FromSource(tmpl->get<std::string>());
      }
    }
    return NotFoundError("tokenizer_config.json: chat_template list has no 'default' entry");
  }
  return InvalidArgumentError("tokenizer_config.json: chat_template: expected a string or list");
}

StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                           bool add_generation_prompt) const {
  std::string out;
  for (size_t m = 0; m < messages.size(); ++m) {
    const ChatMessage& msg = messages[m];
    if (msg.role.empty()) return InvalidArgumentError("chat message {} has no role", m);
    if (kind_ == ChatTemplateKind::kLlavaOnevision) {
      out += "<|im_start|>" + msg.role + "\n";
      // Images first, then videos, then all text, whatever the item order (docs/models.md §2.4).
      for (const ChatContent& c : msg.content) {
        if (c.type == ChatContent::Type::kImage) out += "<image>\n";
      }
      for (const ChatContent& c : msg.content) {
        if (c.type == ChatContent::Type::kVideo) out += "<video>\n";
      }
      for (const ChatContent& c : msg.content) {
        if (c.type == ChatContent::Type::kText) out += c.text;
      }
      out += "<|im_end|>\n";
      continue;
    }
    std::string text;
    for (const ChatContent& c : msg.content) {
      if (c.type != ChatContent::Type::kText) {
        return InvalidArgumentError("chat template {} is text-only; message {} has an {} item",
                                    ChatTemplateKindName(kind_), m,
                                    c.type == ChatContent::Type::kImage ? "image" : "video");
      }
      text += c.text;
    }
    if (kind_ == ChatTemplateKind::kQwen2Instruct && m == 0 && msg.role != "system") {
      out += "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n";
    }
    out += "<|im_start|>" + msg.role + "\n" + text + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

VisualTokenLayout VisualTokenLayout::ForModel(const LlavaConfig& config,
                                              const PreprocessorConfig& pre) {
  VisualTokenLayout l;
  const int64_t g = config.vision.patches_per_side();
  l.drop_cls = config.vision_feature_select_strategy == FeatureSelect::kDefault;
  if (config.arch == LlavaArch::kLlavaOnevision) {
    l.anyres = true;
    l.tile_size = pre.size_height > 0 ? pre.size_height : config.vision.image_size;
    l.tokens_per_tile = g * g;
    l.pinpoints =
        !pre.image_grid_pinpoints.empty() ? pre.image_grid_pinpoints : config.image_grid_pinpoints;
    l.anyres_max_tiles = config.anyres_max_tiles;
  } else {
    // LlavaProcessor: (h/patch)·(w/patch) + 1 (CLS) − 1 if "default".
    l.anyres = false;
    l.tokens_per_tile = g * g;
    l.fixed_image_tokens = g * g + (config.vision.has_class_embedding() ? 1 : 0);
  }
  return l;
}

int64_t NumImageTokens(const VisualTokenLayout& l, int64_t height, int64_t width,
                       bool multi_image_sample) {
  int64_t n = 0;
  if (!l.anyres) {
    n = l.fixed_image_tokens;
  } else if (multi_image_sample) {
    n = l.tokens_per_tile + 1;
  } else {
    // LlavaOnevisionProcessor._get_number_of_features / _get_unpadded_features, in doubles.
    const auto [bh, bw] = SelectBestResolution(height, width, l.pinpoints);
    const int64_t p = static_cast<int64_t>(std::sqrt(static_cast<double>(l.tokens_per_tile)));
    int64_t ch = p * (bh / l.tile_size);
    int64_t cw = p * (bw / l.tile_size);
    auto round7 = [](double x) { return std::round(x * 1e7) / 1e7; };
    const double orig_ratio = static_cast<double>(width) / height;
    const double cur_ratio = static_cast<double>(cw) / ch;
    if (orig_ratio > cur_ratio) {
      const auto nh = static_cast<int64_t>(round7(height * (static_cast<double>(cw) / width)));
      ch -= 2 * ((ch - nh) / 2);
    } else {
      const auto nw = static_cast<int64_t>(round7(width * (static_cast<double>(ch) / height)));
      cw -= 2 * ((cw - nw) / 2);
    }
    int64_t unpadded = ch * cw;
    int64_t newlines = ch;
    const double ratio =
        std::sqrt(static_cast<double>(ch * cw) / static_cast<double>(l.anyres_max_tiles * p * p));
    if (ratio > 1.1) {
      const auto h2 = static_cast<int64_t>(std::floor(ch / ratio));
      const auto w2 = static_cast<int64_t>(std::floor(cw / ratio));
      unpadded = h2 * w2;
      newlines = h2;
    }
    n = unpadded + newlines + l.tokens_per_tile;
  }
  return l.drop_cls ? n - 1 : n;
}

int64_t NumVideoTokens(const VisualTokenLayout& l, int64_t num_frames) {
  const auto side = static_cast<int64_t>(std::sqrt(static_cast<double>(l.tokens_per_tile)));
  const int64_t pooled = (side + 1) / 2;
  return num_frames * pooled * pooled + 1;
}

StatusOr<std::string> ExpandVisualPlaceholders(std::string_view prompt,
                                               std::span<const int64_t> image_counts,
                                               std::span<const int64_t> video_counts,
                                               std::string_view image_token,
                                               std::string_view video_token) {
  std::string out;
  size_t images = 0, videos = 0, pos = 0;
  while (pos < prompt.size()) {
    const size_t ni = prompt.find(image_token, pos);
    const size_t nv = prompt.find(video_token, pos);
    const size_t next = std::min(ni, nv);
    if (next == std::string_view::npos) break;
    out.append(prompt.substr(pos, next - pos));
    const bool is_image = next == ni;
    const std::string_view tok = is_image ? image_token : video_token;
    std::span<const int64_t> counts = is_image ? image_counts : video_counts;
    size_t& k = is_image ? images : videos;
    if (k >= counts.size()) {
      return InvalidArgumentError("prompt has more {} placeholders than the {} given", tok,
                                  counts.size());
    }
    for (int64_t c = 0; c < counts[k]; ++c) out.append(tok);
    ++k;
    pos = next + tok.size();
  }
  out.append(prompt.substr(std::min(pos, prompt.size())));
  if (images != image_counts.size() || videos != video_counts.size()) {
    return InvalidArgumentError(
        "prompt has {} {} and {} {} placeholders but {} image and {} video counts were given",
        images, image_token, videos, video_token, image_counts.size(), video_counts.size());
  }
  return out;
}

}  // namespace framezip::engine::model
