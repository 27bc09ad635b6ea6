// Engine::ScoreTurn (teacher forcing) against the engine's own greedy decoding: feeding the greedy
// reply back must give logits whose argmax is that reply at every position, and leave the
// conversation exactly where generation would have, so the next turn is the same.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "engine/core/thread_pool.h"
#include "engine/runtime/engine.h"
#include "tests/testing/temp_dir.h"

namespace framezip::engine {
namespace {

TEST_CASE("ScoreTurn's logits reproduce greedy decoding and the conversation continues alike",
          "[unit][engine][runtime]") {
  SetComputeThreads(2);
  auto eng = runtime::Engine::Load(testing::SourceDir() / "tests/data/models/tiny-ov-qwen2-f32");
  INFO((eng.ok() ? "" : MessageOf(eng.status())));
  REQUIRE(eng.ok());
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 12;
  const runtime::Message m{"user", "What is in the video?", {}};
  const runtime::Message m2{"user", "And then?", {}};

  auto greedy = *(*eng)->NewConversation();
  auto r = (*eng)->RunTurn(*greedy, std::span(&m, 1), opt);
  REQUIRE(r.ok());
  const std::vector<int32_t> reply = r->token_ids;
  REQUIRE(!reply.empty());

  auto forced = *(*eng)->NewConversation();
  auto logits = (*eng)->ScoreTurn(*forced, std::span(&m, 1), reply);
  INFO((logits.ok() ? "" : MessageOf(logits.status())));
  REQUIRE(logits.ok());
  REQUIRE(logits->dim(0) == static_cast<int64_t>(reply.size()));
  const int64_t v = logits->dim(1);
  for (size_t i = 0; i < reply.size(); ++i) {
    const float* row = logits->data<float>() + i * v;
    CAPTURE(i);
    CHECK(std::max_element(row, row + v) - row == reply[i]);
  }
  CHECK(forced->current().token_ids == reply);
  CHECK(forced->current().text == r->text);
  CHECK(forced->current().stats.stop_reason == r->stats.stop_reason);
  CHECK(forced->cached_tokens() == greedy->cached_tokens());

  auto next_greedy = (*eng)->RunTurn(*greedy, std::span(&m2, 1), opt);
  auto next_forced = (*eng)->RunTurn(*forced, std::span(&m2, 1), opt);
  REQUIRE(next_greedy.ok());
  REQUIRE(next_forced.ok());
  CHECK(next_forced->token_ids == next_greedy->token_ids);
  CHECK(next_forced->stats.cached_tokens == next_greedy->stats.cached_tokens);
  CHECK(next_forced->stats.prefilled_tokens == next_greedy->stats.prefilled_tokens);
}

TEST_CASE("ScoreTurn rejects no tokens and tokens outside the vocabulary",
          "[unit][engine][runtime]") {
  auto eng = runtime::Engine::Load(testing::SourceDir() / "tests/data/models/tiny-ov-qwen2-f32");
  REQUIRE(eng.ok());
  const runtime::Message m{"user", "Hello", {}};
  auto c = *(*eng)->NewConversation();
  CHECK((*eng)->ScoreTurn(*c, std::span(&m, 1), {}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  const int32_t too_big = static_cast<int32_t>((*eng)->config().text.vocab_size);
  CHECK((*eng)->ScoreTurn(*c, std::span(&m, 1), std::span(&too_big, 1)).status().code() ==
        absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace framezip::engine
