// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json, producing the same ids as
// huggingface tokenizers (docs/models.md §6):
//   1. added tokens (normalized=false) are cut out of the raw text, leftmost-longest;
//   2. each remaining piece is normalized (NFC for Qwen2), then normalized=true added tokens are
//      cut out of it;
//   3. the pre-tokenizer splits each piece (Split regex via Oniguruma, ByteLevel mapping);
//   4. BPE encodes each piece (cached);
//   5. the post-processor adds template tokens (Llama-3 BOS) when add_special_tokens.
// Decoding maps ids to tokens and applies the ByteLevel decoder (lossy UTF-8, U+FFFD for broken
// sequences); the streaming decoder never emits a partial character.
//
// Errors: loading a file with an unsupported component (another model type, normalizer,
// pre-tokenizer, decoder or post-processor) is UNIMPLEMENTED naming it; malformed JSON or
// inconsistent merges are INVALID_ARGUMENT naming the field. Encode rejects invalid UTF-8.
// Thread-safety: a loaded Tokenizer is immutable (apart from its internal, locked cache);
// Encode/Decode may be called concurrently. A StreamingDecoder is single-threaded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/model/added_vocabulary.h"
#include "engine/model/bpe.h"
#include "engine/model/text_pipeline.h"

namespace framezip::engine::model {

class Tokenizer {
 public:
  // Parses tokenizer.json text; `file` names it in messages.
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text,
                                                       std::string_view file = "tokenizer.json");
  // Reads `path` (a tokenizer.json).
  static StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::filesystem::path& path);

  // Token ids of `text` (valid UTF-8, else INVALID_ARGUMENT). add_special_tokens applies the
  // post-processor template (BOS for Llama-3; nothing for Qwen2), as HF's encode() default does.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                        bool add_special_tokens = true) const;

  // Text of `ids` (HF decode with clean_up_tokenization_spaces=false). Unknown ids are skipped,
  // like tokenizers does; skip_special_tokens drops added tokens marked special.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Appends the raw bytes of one token (before UTF-8 validation; no separator). Returns false for
  // an unknown id or a skipped special token (nothing appended).
  bool AppendTokenBytes(int32_t id, bool skip_special_tokens, std::string& bytes) const;

  // Id of a token string (added tokens first, then the BPE vocabulary), or nullopt.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Token string of an id (added or BPE), or nullopt.
  std::optional<std::string> IdToToken(int32_t id) const;
  // True when tokenizer.json has no decoder: Decode joins token strings with ' ' (tokenizers'
  // behaviour) instead of byte-level decoding them.
  bool joins_tokens_with_spaces() const { return !byte_level_decoder_; }
  // True for added tokens with special=true.
  bool IsSpecial(int32_t id) const;
  // Largest id known (BPE or added) + 1.
  int32_t vocab_size() const { return vocab_size_; }

  const AddedVocabulary& added_vocabulary() const { return added_; }
  const BpeModel& model() const { return *bpe_; }

 private:
  Tokenizer() = default;
  Status EncodeNormalizedPiece(std::string_view piece, std::vector<int32_t>& out) const;

  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  PostProcessor post_processor_;
  AddedVocabulary added_;
  std::unique_ptr<BpeModel> bpe_;
  bool byte_level_decoder_ = true;
  int32_t vocab_size_ = 0;
};

// Special-token strings of tokenizer_config.json (bos_token, eos_token, ... as a string or an
// {"content": ...} object; absent or null stays unset) and their ids in `tokenizer`.
struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::optional<int32_t> bos_token_id, eos_token_id, pad_token_id, unk_token_id;
  bool clean_up_tokenization_spaces = false;
  std::string tokenizer_class;
};
// Parses tokenizer_config.json text and resolves the ids with `tokenizer` (INVALID_ARGUMENT when
// a named token is not in the vocabulary).
StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view json_text,
                                               const Tokenizer& tokenizer,
                                               std::string_view file = "tokenizer_config.json");
StatusOr<TokenizerConfig> LoadTokenizerConfig(const std::filesystem::path& dir,
                                              const Tokenizer& tokenizer);

// Incremental detokenization for streaming: Push returns the text that became complete with this
// token; bytes of a character split across tokens are held back until it completes (or Finish).
// The concatenation of all Push results and Finish() equals tokenizer.Decode(all ids).
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

  std::string Push(int32_t id);
  // Emits what is held back (an incomplete character becomes U+FFFD) and resets.
  std::string Finish();
  // Bytes currently held back (0–3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
  size_t num_tokens_ = 0;  // tokens pushed since construction / Finish (for ' ' joining)
};

}  // namespace framezip::engine::model
