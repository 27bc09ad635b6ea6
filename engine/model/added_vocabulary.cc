#include "engine/model/added_vocabulary.h"

#include <utf8proc.h>

#include <algorithm>

#include "engine/model/byte_level.h"
#include "engine/model/text_pipeline.h"

namespace framezip::engine::model {

namespace {

// Rust's char::is_whitespace (Unicode White_Space property).
bool IsWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// tokenizers' is_word_character: alphanumeric (Unicode L*/N*) or '_'.
bool IsWordChar(char32_t c) {
  if (c == '_') return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// Last code point of s (s non-empty, valid UTF-8).
char32_t LastCodePoint(std::string_view s, size_t* start = nullptr) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  if (start != nullptr) *start = i;
  size_t j = i;
  return NextCodePoint(s, j);
}

}  // namespace

void AddedVocabulary::Trie::Insert(std::string_view s, int32_t token) {
  if (nodes.empty()) nodes.emplace_back();
  int32_t n = 0;
  for (char c : s) {
    const auto b = static_cast<uint8_t>(c);
    auto it = nodes[n].next.find(b);
    if (it == nodes[n].next.end()) {
      nodes.emplace_back();
      const auto idx = static_cast<int32_t>(nodes.size() - 1);
      nodes[n].next.emplace(b, idx);
      n = idx;
    } else {
      n = it->second;
    }
  }
  // Two tokens with one content: the first in the list wins (tokenizers keeps the first id).
  if (nodes[n].token < 0) nodes[n].token = token;
}

StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const Json& list, const Normalizer& normalizer,
                                                    std::string_view file) {
  AddedVocabulary v;
  if (list.is_null()) return v;
  if (!list.is_array()) {
    return InvalidArgumentError("{}: added_tokens: expected a list, got {}", file,
                                JsonTypeName(list));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& e = list[i];
    const JsonPath at{std::string(file), fmt::format("added_tokens[{}].", i)};
    AddedToken t;
    FZ_ASSIGN_OR_RETURN(int64_t id, RequiredInt(e, "id", at));
    if (id < 0 || id >= (1 << 30)) {
      return InvalidArgumentError("{}: added_tokens[{}].id {} out of range", file, i, id);
    }
    t.id = static_cast<int32_t>(id);
    FZ_ASSIGN_OR_RETURN(std::optional<std::string> content, OptionalString(e, "content", at));
    if (!content || content->empty()) {
      return InvalidArgumentError("{}: added_tokens[{}]: missing or empty content", file, i);
    }
    if (!IsValidUtf8(*content)) {
      return InvalidArgumentError("{}: added_tokens[{}]: content is not valid UTF-8", file, i);
    }
    t.content = *content;
    FZ_ASSIGN_OR_RETURN(t.single_word, BoolOr(e, "single_word", false, at));
    FZ_ASSIGN_OR_RETURN(t.lstrip, BoolOr(e, "lstrip", false, at));
    FZ_ASSIGN_OR_RETURN(t.rstrip, BoolOr(e, "rstrip", false, at));
    FZ_ASSIGN_OR_RETURN(t.special, BoolOr(e, "special", false, at));
    // tokenizers' default: normalized = !special.
    FZ_ASSIGN_OR_RETURN(t.normalized, BoolOr(e, "normalized", !t.special, at));
    const size_t idx = v.tokens_.size();
    v.by_id_.emplace(t.id, idx);
    v.by_content_.emplace(t.content, idx);
    if (t.normalized) {
      FZ_ASSIGN_OR_RETURN(std::string norm, normalizer.Apply(t.content));
      v.normalized_.Insert(norm, static_cast<int32_t>(idx));
    } else {
      v.raw_.Insert(t.content, static_cast<int32_t>(idx));
    }
    v.tokens_.push_back(std::move(t));
  }
  return v;
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::FindByContent(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

std::vector<TextSplit> AddedVocabulary::Split(std::string_view text, const Trie& trie) const {
  std::vector<TextSplit> splits;
  size_t start_offset = 0;
  size_t pos = 0;
  while (!trie.nodes.empty() && pos < text.size()) {
    // Leftmost-longest: the longest token starting at the first position that has any.
    int32_t n = 0, best = -1;
    size_t best_end = 0;
    for (size_t k = pos; k < text.size(); ++k) {
      auto it = trie.nodes[n].next.find(static_cast<uint8_t>(text[k]));
      if (it == trie.nodes[n].next.end()) break;
      n = it->second;
      if (trie.nodes[n].token >= 0) {
        best = trie.nodes[n].token;
        best_end = k + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[best];
    size_t start = pos, stop = best_end;
    pos = best_end;  // the automaton resumes after this match whether or not it is kept
    if (tok.single_word) {
      const bool start_ok = start == 0 || !IsWordChar(LastCodePoint(text.substr(0, start)));
      size_t j = stop;
      const bool stop_ok = stop == text.size() || !IsWordChar(NextCodePoint(text, j));
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t cs = 0;
        if (!IsWhitespace(LastCodePoint(text.substr(0, s), &cs))) break;
        s = cs;
      }
      start = std::max(s, start_offset);  // spaces already taken by a previous match stay there
    }
    if (tok.rstrip) {
      size_t j = stop;
      while (j < text.size()) {
        size_t k = j;
        if (!IsWhitespace(NextCodePoint(text, k))) break;
        j = k;
      }
      stop = j;
      pos = std::max(pos, stop);
    }
    if (start_offset < start) splits.push_back({-1, start_offset, start});
    splits.push_back({tok.id, start, stop});
    start_offset = stop;
  }
  if (start_offset < text.size()) splits.push_back({-1, start_offset, text.size()});
  return splits;
}

}  // namespace framezip::engine::model
