// The turns framezip eval and framezip-eval-frames ask: a question about a video in a fresh
// conversation, answered greedily, and the teacher-forced comparison of two engines (or two
// policies of one engine) on a forced reply (tools/eval/agreement.h).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/engine.h"
#include "tools/eval/agreement.h"

namespace framezip::cli {

// A user message with `pixels` ([F, 3, S, S], preprocessed) as its video, then `question`.
engine::runtime::Message VideoQuestion(std::string question, engine::Tensor pixels);

// Greedy decoding of at most `max_tokens` tokens (tools/train/evaluate.py's settings).
engine::runtime::TurnOptions GreedyTurn(int max_tokens);

// `message` asked in a new conversation of `eng` under `policy`.
StatusOr<engine::runtime::TurnResult> AnswerInFreshConversation(
    engine::runtime::Engine& eng, std::string_view policy, const engine::runtime::Message& message,
    const engine::runtime::TurnOptions& turn);

// Both sides fed `forced` after `message` (each in a new conversation under its policy), their
// next-token logits compared at every position: `reference` is the distribution agreed with.
struct ScoredSide {
  engine::runtime::Engine* engine = nullptr;
  std::string_view policy;
};
StatusOr<eval::AgreementCounts> TeacherForcedAgreement(const ScoredSide& reference,
                                                       const ScoredSide& candidate,
                                                       const engine::runtime::Message& message,
                                                       std::span<const int32_t> forced);

}  // namespace framezip::cli
