#include "tools/framezip/eval_synthvid2.h"

#include <utility>

#include "tools/eval/answer_match.h"
#include "tools/eval/describe_score.h"

namespace framezip::cli {

StatusOr<std::vector<eval::ItemResult>> EvaluateSynthvid2Item(engine::runtime::Engine& engine,
                                                              const eval::Synthvid2Item& item,
                                                              const Synthvid2Options& options,
                                                              engine::Tensor pixels,
                                                              double media_ms) {
  FZ_ASSIGN_OR_RETURN(auto conv, engine.NewConversation(options.policy));
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
    FZ_ASSIGN_OR_RETURN(engine::runtime::TurnResult reply,
                        engine.RunTurn(*conv, std::span(&message, 1), options_for_turn));

    eval::ItemResult r;
    r.id = item.task == "multiturn" ? item.id + "#" + std::to_string(t + 1) : item.id;
    r.task = item.task == "multiturn" ? (t == 0 ? "multiturn_t1" : "multiturn_t2+") : item.task;
    r.num_frames = item.length_bucket;
    r.answer = turn.answer;
    r.pred = eval::StripLikePython(reply.text);
    if (describe) {
      r.describe = eval::ScoreDescribe(reply.text, item.facts);
      r.correct = r.describe->precision == 1 && r.describe->recall == 1;
    } else {
      r.correct = eval::AnswerMatches(reply.text, turn.answer);
    }
    const auto& st = reply.stats;
    r.prompt_tokens = st.prompt_tokens;
    r.visual_tokens = st.visual_tokens;
    r.generated_tokens = st.generated_tokens;
    r.media_ms = t == 0 ? media_ms : 0;
    r.vision_ms = st.vision_ms;
    r.prefill_ms = st.prefill_ms;
    r.decode_ms = st.decode_ms;
    r.item_ms = st.vision_ms + st.prefill_ms + st.decode_ms;
    r.kept_ratio.assign(st.layer_kept_ratio.begin(), st.layer_kept_ratio.end());
    r.kv_bytes = static_cast<int64_t>(st.kv_bytes);
    r.compression_ratio = st.compression_ratio;
    r.selection_ms = st.selection_overhead_ms;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace framezip::cli
