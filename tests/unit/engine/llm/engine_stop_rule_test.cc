// The engine's stop rule is the only one (the server applies its decisions): each StepOutput says
// whether and why the turn ended at its token and how many bytes its delta withholds. A stop
// string that spans two tokens is held back while it may still form, cut once when it does, and
// reported as kStopString on that token only.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/runtime/engine.h"
#include "tests/testing/temp_dir.h"

namespace framezip::engine {
namespace {

// Every step's output of one greedy turn, the first (StartTurn's) included.
std::vector<runtime::StepOutput> Outputs(runtime::Engine& eng, const runtime::TurnOptions& opt) {
  auto c = *eng.NewConversation();
  const runtime::Message m{"user", "Count: 1 2 3 4 5 6 7 8 9 10 11 12", {}};
  std::vector<runtime::StepOutput> outs;
  auto first = eng.StartTurn(*c, std::span(&m, 1), opt);
  REQUIRE(first.ok());
  outs.push_back(*first);
  runtime::Conversation* batch[] = {c.get()};
  while (!outs.back().finished) {
    auto step = eng.Step(batch);
    REQUIRE(step.ok());
    outs.push_back((*step)[0]);
  }
  return outs;
}

TEST_CASE("a stop string across two tokens is cut once and reported on its last token",
          "[unit][engine][runtime]") {
  SetComputeThreads(2);
  auto eng = runtime::Engine::Load(testing::SourceDir() / "tests/data/models/tiny-ov-qwen2-f32");
  INFO((eng.ok() ? "" : MessageOf(eng.status())));
  REQUIRE(eng.ok());
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 24;
  opt.ignore_eos = true;  // a full 24 tokens to pick the stop string from
  const std::vector<runtime::StepOutput> free = Outputs(**eng, opt);
  REQUIRE(free.size() == 24);
  CHECK(free.back().stop_reason == llm::StopReason::kMaxTokens);
  std::string text;
  std::vector<size_t> starts;  // where each token's delta starts in `text`
  for (const auto& o : free) {
    CHECK(o.withheld_bytes == 0);  // no stop strings: nothing held back
    starts.push_back(text.size());
    text += o.delta;
  }
  // The first two adjacent tokens with text, after some text, whose joined text occurs first
  // where they stand.
  size_t i = 0;
  std::string stop;
  for (; i + 1 < free.size(); ++i) {
    stop = free[i].delta + free[i + 1].delta;
    if (starts[i] > 0 && !free[i].delta.empty() && !free[i + 1].delta.empty() &&
        text.find(stop) == starts[i]) {
      break;
    }
  }
  REQUIRE(i + 1 < free.size());
  CAPTURE(text, stop, i);

  opt.sampling.stop_strings = {stop};
  const std::vector<runtime::StepOutput> cut = Outputs(**eng, opt);
  REQUIRE(cut.size() == i + 2);  // ends on the token that completes it
  std::string shown;
  for (size_t t = 0; t < cut.size(); ++t) {
    CAPTURE(t);
    shown += cut[t].delta;
    const bool last = t + 1 == cut.size();
    CHECK(cut[t].finished == last);
    CHECK(cut[t].stop_reason == (last ? llm::StopReason::kStopString : llm::StopReason::kNone));
  }
  CHECK_FALSE(shown.empty());
  CHECK(shown == text.substr(0, starts[i]));             // cut once: exactly the text before it
  CHECK(cut[i].withheld_bytes >= free[i].delta.size());  // held back while it may still form
  CHECK(cut.back().withheld_bytes == stop.size());       // the stop string itself, never shown
}

}  // namespace
}  // namespace framezip::engine
