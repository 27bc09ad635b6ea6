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

// Engine::PrepareTurn + MixedStep (the server's chunked turn start fused with decoding) against
// turns run one at a time: the same greedy tokens for first and follow-up turns whatever the
// chunk size, while other conversations decode in the same steps.
TEST_CASE("MixedStep chunks turn starts among decoding turns with the same tokens",
          "[unit][engine][runtime]") {
  SetComputeThreads(2);
  auto eng = runtime::Engine::Load(testing::SourceDir() / "tests/data/models/tiny-ov-qwen2-f32");
  INFO((eng.ok() ? "" : MessageOf(eng.status())));
  REQUIRE(eng.ok());
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 12;
  opt.ignore_eos = true;  // every turn decodes through the others' chunks
  const std::vector<std::string> first = {"Hello there", "What is in the video? Describe it.",
                                          "Count: 1 2 3 4 5 6 7 8 9 10 11 12"};
  const std::vector<std::string> second = {"And then?", "Say more about the colours, please.",
                                           "Go on"};
  const std::vector<int64_t> chunk = {3, 7, 1000};  // per conversation

  std::vector<std::vector<int32_t>> alone[2];
  std::vector<int64_t> prefilled[2];
  for (size_t i = 0; i < first.size(); ++i) {
    auto c = *(*eng)->NewConversation();
    for (int turn = 0; turn < 2; ++turn) {
      const runtime::Message m{"user", turn == 0 ? first[i] : second[i], {}};
      auto r = (*eng)->RunTurn(*c, std::span(&m, 1), opt);
      REQUIRE(r.ok());
      alone[turn].push_back(r->token_ids);
      prefilled[turn].push_back(r->stats.prefilled_tokens);
    }
  }

  std::vector<std::unique_ptr<runtime::Conversation>> convs;
  for (size_t i = 0; i < first.size(); ++i) convs.push_back(*(*eng)->NewConversation());
  for (int turn = 0; turn < 2; ++turn) {
    CAPTURE(turn);
    std::vector<runtime::Message> messages;
    for (size_t i = 0; i < first.size(); ++i) {
      messages.push_back({"user", turn == 0 ? first[i] : second[i], {}});
    }
    // Conversation i starts at step 2 * i, so starts overlap the others' decoding.
    size_t started = 0;
    int sampled_while_starting = 0;
    for (int step = 0;; ++step) {
      if (started < convs.size() && step == static_cast<int>(2 * started)) {
        REQUIRE((*eng)->PrepareTurn(*convs[started], std::span(&messages[started], 1), opt).ok());
        CHECK(convs[started]->starting());
        CHECK(convs[started]->prefill_remaining() == prefilled[turn][started]);
        ++started;
      }
      std::vector<runtime::StepWork> work;
      for (size_t i = 0; i < started; ++i) {
        runtime::Conversation* c = convs[i].get();
        if (c->starting()) work.push_back({c, chunk[i]});
        if (c->decoding()) work.push_back({c, 0});
      }
      if (work.empty() && started == convs.size()) break;
      if (work.empty()) continue;
      auto outs = (*eng)->MixedStep(work);
      REQUIRE(outs.ok());
      bool any_starting = false, any_decoding = false;
      for (const auto& w : work) (w.prefill_tokens > 0 ? any_starting : any_decoding) = true;
      if (any_starting && any_decoding) ++sampled_while_starting;
      for (size_t k = 0; k < work.size(); ++k) {
        if (work[k].prefill_tokens > 0) {
          CHECK((*outs)[k].sampled == !work[k].conversation->starting());
        } else {
          CHECK((*outs)[k].sampled);
        }
      }
    }
    CHECK(sampled_while_starting > 0);  // chunks really were fused with decode tokens
    for (size_t i = 0; i < convs.size(); ++i) {
      CAPTURE(i);
      CHECK(convs[i]->current().token_ids == alone[turn][i]);
      CHECK(convs[i]->current().stats.prefilled_tokens == prefilled[turn][i]);
      if (turn == 1) CHECK(convs[i]->current().stats.cached_tokens > 0);
    }
  }
}

TEST_CASE("A turn cancelled mid-prompt leaves its conversation refusing new turns",
          "[unit][engine][runtime]") {
  SetComputeThreads(2);
  auto eng = runtime::Engine::Load(testing::SourceDir() / "tests/data/models/tiny-ov-qwen2-f32");
  REQUIRE(eng.ok());
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 4;
  const runtime::Message m{"user", "Tell me about the video, in detail please.", {}};
  auto c = *(*eng)->NewConversation();
  // Cancelled before any chunk ran: nothing reached the cache, the conversation goes on.
  REQUIRE((*eng)->PrepareTurn(*c, std::span(&m, 1), opt).ok());
  CHECK((*eng)->StartTurn(*c, std::span(&m, 1), opt).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  (*eng)->Cancel(*c);
  CHECK(!c->starting());
  CHECK(c->cached_tokens() == 0);
  REQUIRE((*eng)->PrepareTurn(*c, std::span(&m, 1), opt).ok());
  const runtime::StepWork one_row[] = {{c.get(), 1}};
  auto out = (*eng)->MixedStep(one_row);
  REQUIRE(out.ok());
  CHECK(!(*out)[0].sampled);
  CHECK(c->cached_tokens() == 1);
  const runtime::StepWork decode[] = {{c.get(), 0}};
  CHECK((*eng)->MixedStep(decode).status().code() == absl::StatusCode::kFailedPrecondition);
  (*eng)->Cancel(*c);
  CHECK((*eng)->PrepareTurn(*c, std::span(&m, 1), opt).code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK((*eng)->ExportConversation(*c, {}, 1 << 20).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace framezip::engine

namespace framezip::engine {
namespace {

TEST_CASE("A reply cut by max_tokens is recorded once in the history", "[unit][engine][runtime]") {
  SetComputeThreads(2);
  auto eng = runtime::Engine::Load(testing::SourceDir() / "tests/data/models/tiny-ov-qwen2-f32");
  REQUIRE(eng.ok());
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 4;  // the random model never stops by itself this early
  auto c = *(*eng)->NewConversation();
  for (const char* text : {"Hello there", "And then?", "Go on"}) {
    const runtime::Message m{"user", text, {}};
    auto r = (*eng)->RunTurn(*c, std::span(&m, 1), opt);
    REQUIRE(r.ok());
    REQUIRE(r->stats.stop_reason == llm::StopReason::kMaxTokens);
    // The last sampled token is pending (fed with the next turn's prompt); every other token is
    // in the cache. Before the fix the pending token was recorded again when it was fed.
    CHECK(c->history().size() == static_cast<size_t>(c->cached_tokens()) + 1);
    CHECK(c->history().back() == r->token_ids.back());
  }
}

}  // namespace
}  // namespace framezip::engine

namespace framezip::engine {
namespace {

// The KV bytes of the test prompt once prefilled, and of one page in every layer (pages of 16
// tokens), measured on an engine with room to spare.
struct PromptBytes {
  size_t after_prompt = 0;
  size_t page = 0;  // one page of one layer
};

PromptBytes MeasurePromptBytes(const std::filesystem::path& model, const runtime::Message& m,
                               const runtime::TurnOptions& opt) {
  runtime::EngineOptions roomy;
  roomy.kv_page_tokens = 16;
  auto eng = runtime::Engine::Load(model, roomy);
  REQUIRE(eng.ok());
  auto c = *(*eng)->NewConversation();
  REQUIRE((*eng)->StartTurn(*c, std::span(&m, 1), opt).ok());
  PromptBytes out{c->kv_bytes(), 0};
  size_t grown = out.after_prompt;
  runtime::Conversation* one[] = {c.get()};
  while (grown == out.after_prompt) {  // the first step that opens a page in every layer
    REQUIRE((*eng)->Step(one).ok());
    grown = c->kv_bytes();
  }
  const auto layers = static_cast<size_t>((*eng)->config().text.num_hidden_layers);
  REQUIRE(layers >= 2);
  out.page = (grown - out.after_prompt) / layers;
  REQUIRE(out.page * layers == grown - out.after_prompt);
  return out;
}

std::unique_ptr<runtime::Engine> EngineWithKvBytes(const std::filesystem::path& model,
                                                   size_t bytes) {
  runtime::EngineOptions tight;
  tight.kv_page_tokens = 16;
  tight.kv_max_bytes = static_cast<int64_t>(bytes);
  auto eng = runtime::Engine::Load(model, tight);
  REQUIRE(eng.ok());
  return *std::move(eng);
}

TEST_CASE("A step's KV pages are reserved all or nothing, and a half-done step breaks its turn",
          "[unit][engine][runtime]") {
  SetComputeThreads(2);
  const auto model = testing::SourceDir() / "tests/data/models/tiny-ov-qwen2-f32";
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 64;
  const runtime::Message m{"user", "Tell me about the video.", {}};
  const PromptBytes bytes = MeasurePromptBytes(model, m, opt);

  SECTION("Step: without a page for every layer the step fails whole, each cache as it was") {
    // Room for the prompt and one more page: layer 0 would get it, layer 1 not.
    auto eng = EngineWithKvBytes(model, bytes.after_prompt + bytes.page);
    auto c = *eng->NewConversation();
    REQUIRE(eng->StartTurn(*c, std::span(&m, 1), opt).ok());
    runtime::Conversation* batch[] = {c.get()};
    Status failed;
    for (int i = 0; i < opt.sampling.max_new_tokens && failed.ok(); ++i) {
      failed = eng->Step(batch).status();
    }
    REQUIRE(failed.code() == absl::StatusCode::kResourceExhausted);
    CHECK(c->kv_bytes() == bytes.after_prompt);  // nothing of the refused step was stored
    CHECK(c->decoding());                        // it may be retried, or cancelled
    eng->Cancel(*c);
    CHECK(eng->ExportConversation(*c, {}, 1 << 20).ok());
  }

  SECTION("MixedStep: the item without pages sits the step out, the others run") {
    auto eng = EngineWithKvBytes(model, 2 * bytes.after_prompt + 2 * bytes.page);
    auto first = *eng->NewConversation();
    auto second = *eng->NewConversation();
    REQUIRE(eng->StartTurn(*first, std::span(&m, 1), opt).ok());
    REQUIRE(eng->StartTurn(*second, std::span(&m, 1), opt).ok());
    const runtime::StepWork work[] = {{first.get(), 0}, {second.get(), 0}};
    bool refused = false;
    for (int i = 0; i < 20 && !refused; ++i) {
      auto outs = eng->MixedStep(work);
      REQUIRE(outs.ok());
      REQUIRE((*outs)[0].status.ok());
      CHECK((*outs)[0].sampled);
      refused = !(*outs)[1].status.ok();
      if (refused) {
        CHECK((*outs)[1].status.code() == absl::StatusCode::kResourceExhausted);
        CHECK(!(*outs)[1].sampled);
      }
    }
    REQUIRE(refused);
    CHECK(first->kv_bytes() == bytes.after_prompt + 2 * bytes.page);
    CHECK(second->kv_bytes() == bytes.after_prompt);
    CHECK(second->decoding());
  }

  SECTION("ScoreTurn: a forced step the pools refuse stores nothing, but the turn is half done") {
    auto eng = EngineWithKvBytes(model, bytes.after_prompt + bytes.page);
    auto c = *eng->NewConversation();
    const std::vector<int32_t> forced(40, 5);
    const Status failed = eng->ScoreTurn(*c, std::span(&m, 1), forced).status();
    REQUIRE(failed.code() == absl::StatusCode::kResourceExhausted);
    // The decoder reserved the step's pages in both layers before writing: neither holds it.
    CHECK(c->kv_bytes() == bytes.after_prompt);
    // The prompt is in the cache and the forced reply is not: nothing may continue, reuse or
    // export such a turn.
    CHECK(!c->decoding());
    const Status again = eng->PrepareTurn(*c, std::span(&m, 1), opt);
    CHECK(again.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(MessageOf(again), Catch::Contains("failed mid-step"));
    CHECK(eng->ExportConversation(*c, {}, 1 << 20).status().code() ==
          absl::StatusCode::kFailedPrecondition);
    CHECK(eng->ScoreTurn(*c, std::span(&m, 1), forced).status().code() ==
          absl::StatusCode::kFailedPrecondition);
    // Its pages go back with it: a new conversation fits again.
    c.reset();
    auto fresh = *eng->NewConversation();
    CHECK(eng->StartTurn(*fresh, std::span(&m, 1), opt).ok());
  }
}

}  // namespace
}  // namespace framezip::engine
