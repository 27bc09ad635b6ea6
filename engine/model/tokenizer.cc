#include "engine/model/tokenizer.h"

#include <algorithm>

#include "engine/model/byte_level.h"
#include "engine/model/config.h"

namespace framezip::engine::model {

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view json_text,
                                                         std::string_view file) {
  FZ_ASSIGN_OR_RETURN(Json root, ParseJson(json_text, file));
  if (!root.is_object()) {
    return InvalidArgumentError("{}: expected a JSON object, got {}", file, JsonTypeName(root));
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  static const Json kNull;
  auto field = [&root](std::string_view key) -> const Json& {
    const Json* v = FindField(root, key);
    return v != nullptr ? *v : kNull;
  };
  FZ_ASSIGN_OR_RETURN(t->normalizer_, Normalizer::FromJson(field("normalizer"), file));
  FZ_ASSIGN_OR_RETURN(t->pre_tokenizer_, PreTokenizer::FromJson(field("pre_tokenizer"), file));
  FZ_ASSIGN_OR_RETURN(t->post_processor_, PostProcessor::FromJson(field("post_processor"), file));
  const Json& model = field("model");
  if (model.is_null()) return InvalidArgumentError("{}: missing model", file);
  FZ_ASSIGN_OR_RETURN(t->bpe_, BpeModel::FromJson(model, file));
  FZ_ASSIGN_OR_RETURN(t->added_,
                      AddedVocabulary::FromJson(field("added_tokens"), t->normalizer_, file));

  const Json& decoder = field("decoder");
  if (decoder.is_null()) {
    t->byte_level_decoder_ = false;  // tokens joined with spaces, as tokenizers does
  } else {
    const Json* type = FindField(decoder, "type");
    if (type == nullptr || !type->is_string() || type->get<std::string>() != "ByteLevel") {
      return UnimplementedError(
          "{}: decoder type '{}' is not supported (ByteLevel only)", file,
          type != nullptr && type->is_string() ? type->get<std::string>() : "(none)");
    }
  }
  t->vocab_size_ = t->bpe_->vocab_size();
  for (const AddedToken& a : t->added_.tokens())
    t->vocab_size_ = std::max(t->vocab_size_, a.id + 1);
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::filesystem::path& path) {
  FZ_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return FromJson(text, path.filename().string());
}

Status Tokenizer::EncodeNormalizedPiece(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<std::string> words;
  pre_tokenizer_.Apply(piece, words);
  for (const std::string& w : words) bpe_->Encode(w, out);
  return absl::OkStatus();
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                 bool add_special_tokens) const {
  if (!IsValidUtf8(text)) return InvalidArgumentError("text to encode is not valid UTF-8");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const TextSplit& s : added_.SplitRaw(text)) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    FZ_ASSIGN_OR_RETURN(std::string normalized,
                        normalizer_.Apply(text.substr(s.begin, s.end - s.begin)));
    if (!added_.has_normalized_tokens()) {
      FZ_RETURN_IF_ERROR(EncodeNormalizedPiece(normalized, ids));
      continue;
    }
    for (const TextSplit& n : added_.SplitNormalized(normalized)) {
      if (n.id >= 0) {
        ids.push_back(n.id);
      } else {
        FZ_RETURN_IF_ERROR(EncodeNormalizedPiece(
            std::string_view(normalized).substr(n.begin, n.end - n.begin), ids));
      }
    }
  }
  if (add_special_tokens) post_processor_.Apply(ids);
  return ids;
}

bool Tokenizer::AppendTokenBytes(int32_t id, bool skip_special_tokens, std::string& bytes) const {
  const std::string* token = nullptr;
  if (const AddedToken* a = added_.FindById(id)) {
    if (skip_special_tokens && a->special) return false;
    token = &a->content;
  } else {
    token = bpe_->IdToToken(id);
    if (token == nullptr) return false;
  }
  if (byte_level_decoder_) {
    ByteLevelDecodeToken(*token, bytes);
  } else {
    bytes.append(*token);
  }
  return true;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    const size_t mark = bytes.size();
    if (!byte_level_decoder_ && !first) bytes.push_back(' ');  // no decoder: tokens joined by ' '
    if (AppendTokenBytes(id, skip_special_tokens, bytes)) {
      first = false;
    } else {
      bytes.resize(mark);
    }
  }
  return Utf8Lossy(bytes);
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (const AddedToken* a = added_.FindByContent(token)) return a->id;
  const int32_t id = bpe_->TokenToId(token);
  if (id >= 0) return id;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* a = added_.FindById(id)) return a->content;
  if (const std::string* t = bpe_->IdToToken(id)) return *t;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* a = added_.FindById(id);
  return a != nullptr && a->special;
}

StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view json_text,
                                               const Tokenizer& tokenizer, std::string_view file) {
  FZ_ASSIGN_OR_RETURN(Json root, ParseJson(json_text, file));
  if (!root.is_object()) {
    return InvalidArgumentError("{}: expected a JSON object, got {}", file, JsonTypeName(root));
  }
  const JsonPath at{std::string(file), ""};
  TokenizerConfig c;
  struct Slot {
    std::string_view key;
    std::optional<std::string>* token;
    std::optional<int32_t>* id;
  };
  for (const Slot& s : {Slot{"bos_token", &c.bos_token, &c.bos_token_id},
                        Slot{"eos_token", &c.eos_token, &c.eos_token_id},
                        Slot{"pad_token", &c.pad_token, &c.pad_token_id},
                        Slot{"unk_token", &c.unk_token, &c.unk_token_id}}) {
    const Json* v = FindField(root, s.key);
    if (v == nullptr) continue;
    if (v->is_object()) v = FindField(*v, "content");  // serialized AddedToken
    if (v == nullptr || !v->is_string()) {
      return InvalidArgumentError("{}: {}: expected a string or {{\"content\": ...}}", file, s.key);
    }
    *s.token = v->get<std::string>();
    const std::optional<int32_t> id = tokenizer.TokenToId(**s.token);
    if (!id) {
      return InvalidArgumentError("{}: {} '{}' is not in the tokenizer's vocabulary", file, s.key,
                                  **s.token);
    }
    *s.id = id;
  }
  FZ_ASSIGN_OR_RETURN(c.clean_up_tokenization_spaces,
                      BoolOr(root, "clean_up_tokenization_spaces", false, at));
  FZ_ASSIGN_OR_RETURN(c.tokenizer_class, StringOr(root, "tokenizer_class", "", at));
  return c;
}

StatusOr<TokenizerConfig> LoadTokenizerConfig(const std::filesystem::path& dir,
                                              const Tokenizer& tokenizer) {
  FZ_ASSIGN_OR_RETURN(std::string text, ReadFileToString(dir / "tokenizer_config.json"));
  return ParseTokenizerConfig(text, tokenizer);
}

std::string StreamingDecoder::Push(int32_t id) {
  std::string token;
  if (!tokenizer_->AppendTokenBytes(id, skip_special_tokens_, token)) return {};
  if (tokenizer_->joins_tokens_with_spaces() && num_tokens_ > 0) pending_.push_back(' ');
  pending_ += token;
  ++num_tokens_;
  size_t held = 0;
  std::string text = Utf8Lossy(pending_, /*hold_incomplete_tail=*/true, &held);
  pending_.erase(0, pending_.size() - held);
  return text;
}

std::string StreamingDecoder::Finish() {
  std::string text = Utf8Lossy(pending_);
  pending_.clear();
  num_tokens_ = 0;
  return text;
}

}  // namespace framezip::engine::model
