// framezip eval: one answered turn's TurnStats copied into its report row, for both synthvid
// suites (eval_cmd.cc, eval_synthvid2.cc).
#pragma once

#include "engine/runtime/engine.h"
#include "tools/eval/eval_report.h"

namespace framezip::cli {

// Token counts, times, kept ratios, cached tokens and KV bytes (in total and by page format name,
// formats the turn does not use left out) of `stats` into `row`.
void FillTurnStats(const engine::runtime::TurnStats& stats, eval::ItemResult& row);

}  // namespace framezip::cli
