// Added tokens of a tokenizer.json ("added_tokens": special and user-added tokens), found in text
// before normalization and pre-tokenization (docs/models.md §6.2 step 1), as HF tokenizers'
// AddedVocabulary does: leftmost-longest matching (Aho-Corasick LeftmostLongest semantics) with
// the single_word / lstrip / rstrip flags; tokens with normalized=true are matched on the
// normalized text instead. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/model/json_util.h"

namespace framezip::engine::model {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A piece of text: either an added token (id >= 0) or text to tokenize (id == -1).
struct TextSplit {
  int32_t id;
  size_t begin, end;  // byte range in the searched string
};

class AddedVocabulary {
 public:
  // `list` is the "added_tokens" array (may be null). `normalizer` normalizes the content of
  // normalized=true tokens, as tokenizers does when it builds its second matcher.
  static StatusOr<AddedVocabulary> FromJson(const Json& list, const Normalizer& normalizer,
                                            std::string_view file);

  // Splits raw (normalized=false tokens) or normalized (normalized=true tokens) text.
  std::vector<TextSplit> SplitRaw(std::string_view text) const { return Split(text, raw_); }
  std::vector<TextSplit> SplitNormalized(std::string_view text) const {
    return Split(text, normalized_);
  }
  bool has_normalized_tokens() const { return !normalized_.nodes.empty(); }

  const AddedToken* FindById(int32_t id) const;
  const AddedToken* FindByContent(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Byte trie over token contents; node 0 is the root.
  struct Trie {
    struct Node {
      std::map<uint8_t, int32_t> next;
      int32_t token = -1;  // index into tokens_ when a token ends here
    };
    std::vector<Node> nodes;
    void Insert(std::string_view s, int32_t token);
  };
  std::vector<TextSplit> Split(std::string_view text, const Trie& trie) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Trie raw_, normalized_;
};

}  // namespace framezip::engine::model
