// Engine::StartTurns (the server's batched turn start: one Decoder::PrefillBatch for every turn
// starting in a step) against turns run one at a time: the same greedy tokens for first turns and
// for follow-up turns on a cached prefix, and a bad request fails only its own turn.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/runtime/engine.h"
#include "tests/testing/temp_dir.h"

namespace framezip::engine {
namespace {

// Decodes every started conversation to its end in batched Steps.
void DecodeAll(runtime::Engine& eng, std::vector<runtime::Conversation*> active) {
  while (!active.empty()) {
    auto outs = eng.Step(active);
    REQUIRE(outs.ok());
    std::vector<runtime::Conversation*> still;
    for (size_t i = 0; i < active.size(); ++i) {
      if (!(*outs)[i].finished) still.push_back(active[i]);
    }
    active = still;
  }
}

TEST_CASE("StartTurns batches turn starts with the same tokens as separate turns",
          "[unit][engine][runtime]") {
  SetComputeThreads(2);
  auto eng = runtime::Engine::Load(testing::SourceDir() / "tests/data/models/tiny-ov-qwen2-f32");
  INFO((eng.ok() ? "" : MessageOf(eng.status())));
  REQUIRE(eng.ok());
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 10;
  runtime::TurnOptions bad = opt;
  bad.sampling.top_p = 2;  // INVALID_ARGUMENT for this turn only
  const std::vector<std::string> first = {"Hello there", "What is in the video?",
                                          "Count: 1 2 3 4 5 6 7 8 9 10 11 12"};
  const std::vector<std::string> second = {"And then?", "Say more about the colours, please.",
                                           "Go on"};

  // Reference: each conversation alone, two turns.
  std::vector<std::vector<int32_t>> alone[2];
  for (size_t i = 0; i < first.size(); ++i) {
    auto c = *(*eng)->NewConversation();
    for (int turn = 0; turn < 2; ++turn) {
      const runtime::Message m{"user", turn == 0 ? first[i] : second[i], {}};
      auto r = (*eng)->RunTurn(*c, std::span(&m, 1), opt);
      REQUIRE(r.ok());
      alone[turn].push_back(r->token_ids);
    }
  }

  std::vector<std::unique_ptr<runtime::Conversation>> convs;
  std::vector<runtime::Conversation*> batch;
  for (size_t i = 0; i <= first.size(); ++i) {
    convs.push_back(*(*eng)->NewConversation());
    batch.push_back(convs.back().get());
  }
  for (int turn = 0; turn < 2; ++turn) {
    CAPTURE(turn);
    std::vector<runtime::Message> messages;
    for (size_t i = 0; i < first.size(); ++i) {
      messages.push_back({"user", turn == 0 ? first[i] : second[i], {}});
    }
    messages.push_back({"user", "never answered", {}});
    std::vector<std::span<const runtime::Message>> spans;
    for (const auto& m : messages) spans.push_back(std::span(&m, 1));
    std::vector<runtime::TurnOptions> options(first.size(), opt);
    options.push_back(bad);
    // The failing turn goes first, so the others' rows do not start at row 0 of the batch.
    std::rotate(batch.begin(), batch.end() - 1, batch.end());
    std::rotate(spans.begin(), spans.end() - 1, spans.end());
    std::rotate(options.begin(), options.end() - 1, options.end());
    auto outs = (*eng)->StartTurns(batch, spans, options);
    REQUIRE(outs.size() == batch.size());
    CHECK(outs[0].status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(batch[0]->cached_tokens() == 0);
    std::vector<runtime::Conversation*> active;
    for (size_t i = 1; i < batch.size(); ++i) {
      REQUIRE(outs[i].ok());
      if (!outs[i]->finished) active.push_back(batch[i]);
    }
    DecodeAll(**eng, active);
    for (size_t i = 0; i < first.size(); ++i) {
      CAPTURE(i);
      CHECK(batch[i + 1]->current().token_ids == alone[turn][i]);
      if (turn == 1) CHECK(batch[i + 1]->current().stats.cached_tokens > 0);
    }
    std::rotate(batch.begin(), batch.begin() + 1, batch.end());  // back to the original order
  }
}

}  // namespace
}  // namespace framezip::engine
