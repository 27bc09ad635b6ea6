// framezip eval --suite synthvid2: one v2 item (tools/eval/synthvid2_split.h) run as a session on
// the engine and scored per turn.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/runtime/engine.h"
#include "tools/eval/eval_report.h"
#include "tools/eval/synthvid2_split.h"

namespace framezip::cli {

struct Synthvid2Options {
  std::string policy = "none";
  int max_tokens = 6;            // short answers (evaluate.py's)
  int describe_max_tokens = 96;  // describe replies run to ~60 tokens
  // Short-answer turns are teacher-forced: the expected answer (and the end of the reply) is fed
  // instead of sampled, so a later turn sees the right history whatever the model said before.
  bool teacher_forced = false;
  // After every turn the conversation is committed as a KV segment (the page codec's blocks, as a
  // server session commits to its KV store) and the next turn runs on a conversation restored
  // from all segments so far, as a server replica does after eviction or on another pod.
  bool sessions = false;
};

// The item's video (`pixels`, preprocessed, decoded in `media_ms`) goes with turn 1; every turn's
// greedy reply is scored on its own: exact match, or for describe the per-fact score (correct
// when every fact and nothing else is said). By default the session is free-running, as a user's
// is: the model's own earlier replies stay in its history. With options.teacher_forced every
// short-answer turn is scored by Engine::ScoreTurn on the expected answer instead: it is correct
// when the greedy choice at every answer position, and at the end of the reply, is the expected
// token (which is exactly when greedy decoding would have produced the answer and stopped), and
// the expected answer stays in the history. Describe turns stay free-running. One ItemResult per
// turn; a multiturn item's turns are tasks "multiturn_t1" and "multiturn_t2+", so later turns
// are reported apart.
StatusOr<std::vector<eval::ItemResult>> EvaluateSynthvid2Item(engine::runtime::Engine& engine,
                                                              const eval::Synthvid2Item& item,
                                                              const Synthvid2Options& options,
                                                              engine::Tensor pixels,
                                                              double media_ms);

}  // namespace framezip::cli
