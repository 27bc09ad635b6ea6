#include "tools/framezip/eval_turns.h"

#include <utility>

namespace framezip::cli {

using engine::runtime::Message;

Message VideoQuestion(std::string question, engine::Tensor pixels) {
  Message message;
  message.text = std::move(question);
  engine::runtime::VisualInput video;
  video.kind = engine::runtime::VisualInput::Kind::kVideo;
  video.pixels = std::move(pixels);
  message.visuals.push_back(std::move(video));
  return message;
}

engine::runtime::TurnOptions GreedyTurn(int max_tokens) {
  engine::runtime::TurnOptions turn;
  turn.sampling.max_new_tokens = max_tokens;
  turn.sampling.do_sample = false;
  return turn;
}

StatusOr<engine::runtime::TurnResult> AnswerInFreshConversation(
    engine::runtime::Engine& eng, std::string_view policy, const Message& message,
    const engine::runtime::TurnOptions& turn) {
  FZ_ASSIGN_OR_RETURN(auto conv, eng.NewConversation(policy));
  return eng.RunTurn(*conv, std::span<const Message>(&message, 1), turn);
}

namespace {

StatusOr<engine::Tensor> ScoreForced(const ScoredSide& side, const Message& message,
                                     std::span<const int32_t> forced) {
  FZ_ASSIGN_OR_RETURN(auto conv, side.engine->NewConversation(side.policy));
  return side.engine->ScoreTurn(*conv, std::span<const Message>(&message, 1), forced);
}

}  // namespace

StatusOr<eval::AgreementCounts> TeacherForcedAgreement(const ScoredSide& reference,
                                                       const ScoredSide& candidate,
                                                       const Message& message,
                                                       std::span<const int32_t> forced) {
  FZ_ASSIGN_OR_RETURN(const engine::Tensor want, ScoreForced(reference, message, forced));
  FZ_ASSIGN_OR_RETURN(const engine::Tensor got, ScoreForced(candidate, message, forced));
  if (got.numel() != want.numel()) {
    return InternalError("teacher-forced logits: {} values against the reference's {}", got.numel(),
                         want.numel());
  }
  const size_t n = static_cast<size_t>(want.numel());
  return eval::CompareNextTokenLogits(std::span<const float>(want.data<float>(), n),
                                      std::span<const float>(got.data<float>(), n), want.dim(1));
}

}  // namespace framezip::cli
