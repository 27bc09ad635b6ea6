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
};

// The item's video (`pixels`, preprocessed, decoded in `media_ms`) goes with turn 1; every turn's
// greedy reply is scored on its own: exact match, or for describe the per-fact score (correct
// when every fact and nothing else is said). The session is free-running, as a user's is: the
// model's own earlier replies stay in its history. One ItemResult per turn; a multiturn item's
// turns are tasks "multiturn_t1" and "multiturn_t2+", so later turns are reported apart.
StatusOr<std::vector<eval::ItemResult>> EvaluateSynthvid2Item(engine::runtime::Engine& engine,
                                                              const eval::Synthvid2Item& item,
                                                              const Synthvid2Options& options,
                                                              engine::Tensor pixels,
                                                              double media_ms);

}  // namespace framezip::cli
