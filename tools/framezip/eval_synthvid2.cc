#include "tools/framezip/eval_synthvid2.h"

#include <algorithm>
#include <utility>

#include "engine/kv/page_codec.h"
#include "tools/eval/answer_match.h"
#include "tools/eval/describe_score.h"
#include "tools/framezip/eval_turn_stats.h"

namespace framezip::cli {
namespace {

// The expected answer's tokens as the model should generate them: the answer, then the first of
// the model's end-of-reply ids.
StatusOr<std::vector<int32_t>> ExpectedReply(const engine::runtime::Engine& engine,
                                             const std::string& answer) {
  const auto& eos = engine.config().generation.eos_token_ids;
  if (eos.empty()) return FailedPreconditionError("teacher forcing: the model names no eos id");
  FZ_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                      engine.tokenizer().Encode(answer, /*add_special_tokens=*/false));
  ids.push_back(static_cast<int32_t>(eos.front()));
  return ids;
}

// Greedy choice at each row of logits [n, V].
std::vector<int32_t> ArgmaxRows(const engine::Tensor& logits) {
  const int64_t n = logits.dim(0), v = logits.dim(1);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data<float>() + i * v;
    out[static_cast<size_t>(i)] = static_cast<int32_t>(std::max_element(row, row + v) - row);
  }
  return out;
}

// What a server session has committed: its segments, decoded as a restore reads them back, and
// where the next commit starts.
struct CommittedSession {
  std::vector<engine::kv::DecodedSegment> segments;
  engine::kv::SegmentMark mark;
};

// Commits what `conv` added since the last commit (1 MiB blocks, the server's default), then
// rebuilds the conversation from every committed segment.
StatusOr<std::unique_ptr<engine::runtime::Conversation>> CommitAndRestore(
    engine::runtime::Engine& engine, const engine::runtime::Conversation& conv,
    CommittedSession& session) {
  FZ_ASSIGN_OR_RETURN(engine::runtime::ConversationSegment segment,
                      engine.ExportConversation(conv, session.mark, size_t{1} << 20));
  FZ_ASSIGN_OR_RETURN(engine::kv::DecodedSegment decoded,
                      engine::kv::DecodeSegment(segment.encoded.blocks));
  session.segments.push_back(std::move(decoded));
  FZ_ASSIGN_OR_RETURN(engine::runtime::RestoredConversation restored,
                      engine.RestoreConversation(session.segments));
  session.mark = std::move(segment.encoded.next_mark);
  return std::move(restored.conversation);
}

}  // namespace

StatusOr<std::vector<eval::ItemResult>> EvaluateSynthvid2Item(engine::runtime::Engine& engine,
                                                              const eval::Synthvid2Item& item,
                                                              const Synthvid2Options& options,
                                                              engine::Tensor pixels,
                                                              double media_ms) {
  FZ_ASSIGN_OR_RETURN(auto conv, engine.NewConversation(options.policy));
  CommittedSession session;
  std::vector<eval::ItemResult> out;
  for (size_t t = 0; t < item.turns.size(); ++t) {
    const eval::Synthvid2Turn& turn = item.turns[t];
    engine::runtime::Message message;
    message.text = turn.question;
    if (t == 0) {
      engine::runtime::VisualInput video;
      video.kind = engine::runtime::VisualInput::Kind::kVideo;
      video.pixels = std::move(pixels);
      message.visuals.push_back(std::move(video));
    }
    const bool describe = item.task == "describe";
    engine::runtime::TurnOptions options_for_turn;
    options_for_turn.sampling.do_sample = false;
    options_for_turn.sampling.max_new_tokens =
        describe ? options.describe_max_tokens : options.max_tokens;
    eval::ItemResult r;
    engine::runtime::TurnResult reply;
    if (options.teacher_forced && !describe) {
      FZ_ASSIGN_OR_RETURN(const std::vector<int32_t> expected, ExpectedReply(engine, turn.answer));
      FZ_ASSIGN_OR_RETURN(const engine::Tensor logits,
                          engine.ScoreTurn(*conv, std::span(&message, 1), expected));
      const std::vector<int32_t> greedy = ArgmaxRows(logits);
      reply = conv->current();
      // What greedy decoding says where it first leaves the expected reply (or the whole reply).
      const auto first_miss = std::mismatch(greedy.begin(), greedy.end(), expected.begin()).first;
      const size_t said = static_cast<size_t>(first_miss - greedy.begin()) +
                          (first_miss == greedy.end() ? 0 : 1);
      reply.text = engine.tokenizer().Decode(std::span(greedy.data(), said),
                                             /*skip_special_tokens=*/true);
      r.correct = first_miss == greedy.end();
    } else {
      FZ_ASSIGN_OR_RETURN(reply, engine.RunTurn(*conv, std::span(&message, 1), options_for_turn));
    }

    r.id = item.task == "multiturn" ? item.id + "#" + std::to_string(t + 1) : item.id;
    r.task = item.task == "multiturn" ? (t == 0 ? "multiturn_t1" : "multiturn_t2+") : item.task;
    r.num_frames = item.length_bucket;
    r.answer = turn.answer;
    r.pred = eval::StripLikePython(reply.text);
    if (describe) {
      r.describe = eval::ScoreDescribe(reply.text, item.facts);
      r.correct = r.describe->precision == 1 && r.describe->recall == 1;
    } else if (!options.teacher_forced) {
      r.correct = eval::AnswerMatches(reply.text, turn.answer);
    }
    FillTurnStats(reply.stats, r);
    r.turn = static_cast<int>(t) + 1;
    r.media_ms = t == 0 ? media_ms : 0;
    r.item_ms = r.vision_ms + r.prefill_ms + r.decode_ms;
    out.push_back(std::move(r));
    if (options.sessions && t + 1 < item.turns.size()) {
      FZ_ASSIGN_OR_RETURN(conv, CommitAndRestore(engine, *conv, session));
    }
  }
  return out;
}

}  // namespace framezip::cli
