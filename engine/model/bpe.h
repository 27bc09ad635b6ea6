// The BPE model of a tokenizer.json (docs/models.md §6.1, §6.4), as huggingface tokenizers runs it:
// split a pre-tokenized piece into characters, then repeatedly merge the adjacent pair with the
// lowest merge rank (leftmost on ties) until no pair has a merge. Merges may be given as
// "a b" strings or ["a", "b"] pairs; rank = position in the list. ignore_merges emits a piece
// that is itself a vocabulary entry directly. Characters missing from the vocabulary use
// byte_fallback (<0xXX> tokens), else unk_token (fused when fuse_unk), else are dropped.
// dropout must be null or 0 (greedy inference).
//
// Results per piece are cached (bounded); Encode is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/model/json_util.h"

namespace framezip::engine::model {

class BpeModel {
 public:
  // `model` is the "model" object of tokenizer.json (type "BPE").
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& model, std::string_view file);

  // Appends the ids of one pre-tokenized piece to `out`.
  void Encode(std::string_view piece, std::vector<int32_t>& out) const;

  // Token string of `id`, or nullptr.
  const std::string* IdToToken(int32_t id) const;
  // -1 if absent.
  int32_t TokenToId(std::string_view token) const;
  // Largest id + 1.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  size_t num_merges() const { return merges_.size(); }

 private:
  struct PairHash {
    size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9E3779B97F4A7C15ull); }
  };
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  void EncodeUncached(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;  // "" for ids without a token
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, Merge, PairHash> merges_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kMaxCachedPieceBytes = 256;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace framezip::engine::model
