// The normalizer, pre-tokenizer and post-processor stages of tokenizer.json (docs/models.md §6.2),
// parsed from their JSON objects and applied exactly as huggingface tokenizers does.
//
// Supported (everything Qwen2 / Llama-3 / GPT-2 style byte-level files use):
//   normalizer:     null, NFC, NFD, NFKC, NFKD, Sequence
//   pre_tokenizer:  null, Split (Regex or String pattern; behaviors Isolated, Removed,
//                   MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel
//                   (add_prefix_space, use_regex), Sequence
//   post_processor: null, ByteLevel (ids unchanged), TemplateProcessing (single), Sequence
// Anything else is UNIMPLEMENTED naming the type. Stages are immutable after parsing and
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/model/json_util.h"
#include "engine/model/onig_regex.h"

namespace framezip::engine::model {

class Normalizer {
 public:
  // `j` may be null (no normalization).
  static StatusOr<Normalizer> FromJson(const Json& j, std::string_view file);
  // Applies the forms in order. `text` must be valid UTF-8.
  StatusOr<std::string> Apply(std::string_view text) const;
  bool empty() const { return forms_.empty(); }

 private:
  enum class Form { kNfc, kNfd, kNfkc, kNfkd };
  std::vector<Form> forms_;
};

// Pre-tokenization splits a normalized piece into the strings BPE sees; byte-level stages map
// them to the GPT-2 alphabet.
class PreTokenizer {
 public:
  static StatusOr<PreTokenizer> FromJson(const Json& j, std::string_view file);
  // Appends the pieces of `text` (in order) to `out`.
  void Apply(std::string_view text, std::vector<std::string>& out) const;

 private:
  enum class Kind { kSplit, kByteLevel };
  enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    Kind kind = Kind::kSplit;
    std::shared_ptr<const OnigRegex> regex;  // Split with a Regex pattern; ByteLevel use_regex
    std::string literal;                     // Split with a String pattern
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
  };
  static void SplitPiece(const Step& step, std::string_view piece, std::vector<std::string>& out);
  std::vector<Step> steps_;
};

class PostProcessor {
 public:
  static StatusOr<PostProcessor> FromJson(const Json& j, std::string_view file);
  // Adds the template's special tokens around `ids` (single-sequence template).
  void Apply(std::vector<int32_t>& ids) const;
  // Number of ids Apply adds.
  size_t num_added() const { return prefix_.size() + suffix_.size(); }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

}  // namespace framezip::engine::model
