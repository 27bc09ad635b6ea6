// Sampler: picks the next token from a row of logits as HF `generate` does (docs/models.md §8).
//
// Order of operations (transformers' logits processors, then warpers):
//   1. repetition_penalty (≠ 1): for every distinct token already in the sequence (prompt and
//      generated), logit < 0 ? logit · p : logit / p.
//   2. greedy (do_sample = false): argmax, first index on ties. Steps 3–5 are skipped.
//   3. temperature: logits / T.
//   4. top_k (> 0): keep logits >= the k-th largest (ties at the boundary are kept).
//   5. top_p (< 1): sort ascending, drop the tokens whose cumulative probability is <= 1 − top_p,
//      always keeping the most likely one.
//   6. sample from softmax of what is left with this sampler's own RNG (seeded: reproducible).
//
// StopCondition decides when a turn ends: an eos/stop token id, a stop string appearing in the
// generated text, or max_new_tokens.
//
// Thread-safety: a Sampler holds RNG state; use one per sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/ops/sample.h"

namespace framezip::engine::llm {

struct SamplingParams {
  bool do_sample = false;  // false = greedy
  float temperature = 1.0f;
  int top_k = 0;       // 0 = off (HF generate's default is 50 when sampling; callers choose)
  float top_p = 1.0f;  // 1 = off
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  int max_new_tokens = 256;
  std::vector<int32_t> stop_token_ids;  // eos ids from generation_config plus any extra
  std::vector<std::string> stop_strings;
};

// INVALID_ARGUMENT naming the bad field (temperature <= 0 when sampling, top_p outside (0, 1],
// repetition_penalty <= 0, top_k < 0, max_new_tokens < 1).
Status ValidateSamplingParams(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // The next token. `logits` [V] is modified in place (penalty, temperature, masking).
  // `history`: the sequence's tokens so far (prompt + generated) for the repetition penalty.
  int32_t Sample(std::span<float> logits, std::span<const int32_t> history);

  // What Sample does to pick the next token, as one row of ops::SampleTokens: the parameters,
  // the penalised ids and this step's draw (taken from this sampler's RNG exactly as Sample takes
  // it). ops::SampleTokens on any device then gives Sample's token for those logits, so a GPU
  // engine samples where its logits are and only the ids come back.
  ops::RowSampling NextRow(std::span<const int32_t> history);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

// Why a turn stopped.
enum class StopReason { kNone, kStopToken, kStopString, kMaxTokens, kCancelled };
std::string_view StopReasonName(StopReason r);

class StopCondition {
 public:
  explicit StopCondition(const SamplingParams& params) : params_(params) {}

  // Call after each generated token with the text decoded so far (of generated tokens only).
  // Returns the reason to stop, or kNone. For kStopString, *text_end is set to the byte length of
  // the text to keep (the text before the stop string, which is not shown).
  StopReason Check(int32_t token, int generated_tokens, const std::string& generated_text,
                   size_t* text_end) const;

  // While the turn goes on: how many bytes at the end of `generated_text` must not be shown yet
  // because they are the start of a stop string (the longest such suffix; 0 with no stop
  // strings). Showing them could leak a stop string that the next tokens complete.
  size_t HeldBackBytes(const std::string& generated_text) const;

  const std::vector<std::string>& stop_strings() const { return params_.stop_strings; }

 private:
  SamplingParams params_;
};

}  // namespace framezip::engine::llm
