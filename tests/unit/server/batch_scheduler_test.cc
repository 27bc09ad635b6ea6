// BatchScheduler over the deterministic FakeModelBackend: streaming, KV reuse across turns,
// continuous batching, cancellation within a step, deadlines, the wait queue and drain.
#include "server/batch_scheduler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <mutex>

#include "tests/integration/server_fake_model_backend.h"

namespace framezip::server {
namespace {

using namespace std::chrono_literals;

struct Result {
  std::string text;
  Status status;
  TurnStats stats;
  int64_t ids = 0;             // token ids received over all deltas
  int64_t id_only_deltas = 0;  // deltas with ids but no text yet
  std::vector<std::string> deltas;  // each delta's text, in order
  int done_calls = 0;               // on_done calls (exactly one per turn)
};

// Collects one turn's callbacks; Wait() blocks the test thread (not an engine thread).
class Collector {
 public:
  TurnCallbacks Callbacks() {
    return {[this](std::string text, std::vector<uint32_t> ids) {
              std::lock_guard lock(mu_);
              result_.ids += static_cast<int64_t>(ids.size());
              if (text.empty() && !ids.empty()) ++result_.id_only_deltas;
              result_.text += text;
              result_.deltas.push_back(text);
              ++deltas_;
              cv_.notify_all();
            },
            [this](Status status, TurnStats stats) {
              std::lock_guard lock(mu_);
              result_.status = status;
              result_.stats = std::move(stats);
              ++result_.done_calls;
              done_ = true;
              cv_.notify_all();
            }};
  }
  Result Wait() {
    std::unique_lock lock(mu_);
    REQUIRE(cv_.wait_for(lock, 20s, [this] { return done_; }));
    return result_;
  }
  void WaitForDeltas(int n) {
    std::unique_lock lock(mu_);
    REQUIRE(cv_.wait_for(lock, 20s, [&] { return deltas_ >= n || done_; }));
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  Result result_;
  int deltas_ = 0;
  bool done_ = false;
};

TurnRequest UserTurn(std::string id, std::string session, std::vector<ChatMessage> history,
                     std::string text) {
  TurnRequest r;
  r.turn_id = std::move(id);
  r.session_id = session;
  r.session_key = std::move(session);  // the engine keys session KV by the key
  r.messages = std::move(history);
  r.messages.push_back({Role::kUser, {{std::move(text), ""}}});
  return r;
}

ChatMessage Msg(Role role, std::string text) { return {role, {{std::move(text), ""}}}; }

TEST_CASE("a turn streams its answer and ends with stats", "[unit][server]") {
  auto backend = std::make_unique<testing::FakeModelBackend>();
  BatchScheduler scheduler(std::move(backend), {});
  Collector c;
  REQUIRE(scheduler.Submit(UserTurn("t1", "s1", {}, "hello"), c.Callbacks()).ok());
  const Result r = c.Wait();
  REQUIRE(r.status.ok());
  CHECK(r.text.rfind("You said 'hello' (context ", 0) == 0);
  CHECK(r.stats.finish_reason == FinishReason::kStop);
  CHECK(r.stats.generated_tokens == r.text.size() + 1);  // + end of turn
  CHECK(r.stats.cached_tokens == 0);
  CHECK(r.stats.prefilled_tokens == r.stats.prompt_tokens);
  CHECK(r.stats.time_to_first_token_seconds > 0);
  CHECK(r.stats.e2e_seconds >= r.stats.time_to_first_token_seconds);
  REQUIRE(r.stats.kv_bytes.size() == 1);
  CHECK(r.stats.kv_bytes[0].bytes == (r.stats.prompt_tokens + r.stats.generated_tokens) * 1024);
}

TEST_CASE("a follow-up turn restores the session's KV and prefills only the new text",
          "[unit][server]") {
  BatchScheduler scheduler(std::make_unique<testing::FakeModelBackend>(), {});
  Collector first;
  REQUIRE(scheduler.Submit(UserTurn("t1", "s", {Msg(Role::kSystem, "be brief")}, "what?"),
                           first.Callbacks())
              .ok());
  const Result r1 = first.Wait();
  REQUIRE(r1.status.ok());
  Collector second;
  std::vector<ChatMessage> history = {Msg(Role::kSystem, "be brief"), Msg(Role::kUser, "what?"),
                                      Msg(Role::kAssistant, r1.text)};
  REQUIRE(scheduler.Submit(UserTurn("t2", "s", history, "why?"), second.Callbacks()).ok());
  const Result r2 = second.Wait();
  REQUIRE(r2.status.ok());
  // Everything of turn 1 (prompt + answer + end of turn) is restored.
  CHECK(r2.stats.cached_tokens == r1.stats.prompt_tokens + r1.stats.generated_tokens);
  CHECK(r2.stats.prefilled_tokens == r2.stats.prompt_tokens - r2.stats.cached_tokens);
  CHECK(r2.stats.prefilled_tokens < 10);

  // The same history in a fresh, stateless turn gives the same answer with nothing cached.
  Collector fresh;
  REQUIRE(scheduler.Submit(UserTurn("t3", "", history, "why?"), fresh.Callbacks()).ok());
  const Result r3 = fresh.Wait();
  CHECK(r3.text == r2.text);
  CHECK(r3.stats.cached_tokens == 0);
}

TEST_CASE("concurrent turns are batched together and keep their own answers", "[unit][server]") {
  testing::FakeModelOptions options;
  options.step_delay = 1ms;
  auto backend = std::make_unique<testing::FakeModelBackend>(options);
  auto* fake = backend.get();
  BatchScheduler scheduler(std::move(backend), {});
  constexpr int kTurns = 8;
  std::vector<Collector> collectors(kTurns);
  for (int i = 0; i < kTurns; ++i) {
    REQUIRE(scheduler
                .Submit(UserTurn(fmt::format("t{}", i), fmt::format("s{}", i), {},
                                 fmt::format("question {}", i)),
                        collectors[i].Callbacks())
                .ok());
  }
  for (int i = 0; i < kTurns; ++i) {
    const Result r = collectors[i].Wait();
    REQUIRE(r.status.ok());
    CHECK(r.text.rfind(fmt::format("You said 'question {}'", i), 0) == 0);
  }
  CHECK(fake->largest_batch() >= 2);
}

TEST_CASE("cancelling a running turn frees its pages within one step", "[unit][server]") {
  testing::FakeModelOptions options;
  options.step_delay = 2ms;
  auto backend = std::make_unique<testing::FakeModelBackend>(options);
  auto* fake = backend.get();
  BatchScheduler scheduler(std::move(backend), {});
  Collector c;
  REQUIRE(scheduler.Submit(UserTurn("t1", "s", {}, "a long question"), c.Callbacks()).ok());
  c.WaitForDeltas(3);
  const uint64_t steps_at_cancel = scheduler.steps();
  scheduler.Cancel("t1", CancelledError("client went away"));
  const Result r = c.Wait();
  CHECK(r.status.code() == absl::StatusCode::kCancelled);
  CHECK(r.stats.finish_reason == FinishReason::kCancelled);
  CHECK(scheduler.steps() <= steps_at_cancel + 2);  // the step in flight, at most one more
  CHECK(fake->live_sequences() == 0);
  CHECK(fake->KvUsedBytes() == 0);  // a cancelled turn keeps nothing for its session
  CHECK(scheduler.Load().running == 0);
}

TEST_CASE("a turn past its deadline ends with DEADLINE_EXCEEDED and frees its pages",
          "[unit][server]") {
  testing::FakeModelOptions options;
  options.step_delay = 2ms;
  auto backend = std::make_unique<testing::FakeModelBackend>(options);
  auto* fake = backend.get();
  BatchScheduler scheduler(std::move(backend), {});
  Collector c;
  TurnRequest request = UserTurn("t1", "s", {}, "slow");
  request.deadline = Clock::now() + 30ms;
  REQUIRE(scheduler.Submit(std::move(request), c.Callbacks()).ok());
  const Result r = c.Wait();
  CHECK(r.status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(fake->KvUsedBytes() == 0);
}

TEST_CASE("stop strings and max_tokens end a turn", "[unit][server]") {
  BatchScheduler scheduler(std::make_unique<testing::FakeModelBackend>(), {});
  SECTION("stop string") {
    Collector c;
    TurnRequest request = UserTurn("t1", "", {}, "abc");
    request.sampling.stop = {"'abc'"};
    REQUIRE(scheduler.Submit(std::move(request), c.Callbacks()).ok());
    const Result r = c.Wait();
    REQUIRE(r.status.ok());
    CHECK(r.text == "You said ");
    CHECK(r.stats.finish_reason == FinishReason::kStop);
    // Text that may start the stop string is held back ("'abc", 4 characters, one per token), so
    // those 4 tokens had no deliverable text: they still reached the client as they came, as ids
    // alone. Every generated token's id arrived.
    CHECK(r.ids == r.stats.generated_tokens);
    CHECK(r.id_only_deltas >= 4);
  }
  SECTION("max tokens") {
    Collector c;
    TurnRequest request = UserTurn("t1", "", {}, "abc");
    request.sampling.max_tokens = 5;
    REQUIRE(scheduler.Submit(std::move(request), c.Callbacks()).ok());
    const Result r = c.Wait();
    REQUIRE(r.status.ok());
    CHECK(r.text == "You s");
    CHECK(r.stats.finish_reason == FinishReason::kLength);
  }
}

// The backend's stop rule (for the fake as for the engine, llm::StopCondition) decides; the
// scheduler applies its decision once, so a stop string split across tokens is cut once, no
// held-back byte of it ever reaches the client, and the finish reason is the backend's.
TEST_CASE("a stop string split across two tokens is honoured once", "[unit][server]") {
  BatchScheduler scheduler(std::make_unique<testing::FakeModelBackend>(), {});
  // The fake answers "You said '<question>' (context ...)." one character per token.
  SECTION("completed: the text ends before it") {
    Collector c;
    TurnRequest request = UserTurn("t1", "", {}, "abc");
    request.sampling.stop = {"sa"};  // "s" and "a" are two tokens
    REQUIRE(scheduler.Submit(std::move(request), c.Callbacks()).ok());
    const Result r = c.Wait();
    REQUIRE(r.status.ok());
    CHECK(r.done_calls == 1);
    CHECK(r.text == "You ");
    CHECK(r.stats.finish_reason == FinishReason::kStop);
    CHECK(r.stats.generated_tokens == 6);  // "You " and the two tokens of the stop string
    CHECK(r.ids == 6);
    for (const std::string& delta : r.deltas) CHECK(delta.find('s') == std::string::npos);
  }
  SECTION("not completed: the held-back byte is shown with the next token") {
    Collector c;
    TurnRequest request = UserTurn("t1", "", {}, "abc");
    request.sampling.stop = {"sx"};
    REQUIRE(scheduler.Submit(std::move(request), c.Callbacks()).ok());
    const Result r = c.Wait();
    REQUIRE(r.status.ok());
    CHECK(r.text.rfind("You said 'abc' (context ", 0) == 0);
    CHECK(r.stats.finish_reason == FinishReason::kStop);  // the end-of-turn token
    CHECK(std::find(r.deltas.begin(), r.deltas.end(), "sa") != r.deltas.end());
  }
  SECTION("max_tokens on a held-back byte: it is shown, the reason is length") {
    Collector c;
    TurnRequest request = UserTurn("t1", "", {}, "abc");
    request.sampling.stop = {"sx"};
    request.sampling.max_tokens = 5;  // ends on the "s"
    REQUIRE(scheduler.Submit(std::move(request), c.Callbacks()).ok());
    const Result r = c.Wait();
    REQUIRE(r.status.ok());
    CHECK(r.done_calls == 1);
    CHECK(r.text == "You s");
    CHECK(r.stats.finish_reason == FinishReason::kLength);
  }
  SECTION("a stop token id ends the turn without its text") {
    Collector c;
    TurnRequest request = UserTurn("t1", "", {}, "abc");
    request.sampling.stop_token_ids = {static_cast<uint32_t>('s')};
    REQUIRE(scheduler.Submit(std::move(request), c.Callbacks()).ok());
    const Result r = c.Wait();
    REQUIRE(r.status.ok());
    CHECK(r.text == "You ");
    CHECK(r.stats.finish_reason == FinishReason::kStop);
    CHECK(r.ids == 4);  // the stop token's id is not shown
  }
}

TEST_CASE("admission refuses a turn larger than the KV budget and a full queue",
          "[unit][server]") {
  testing::FakeModelOptions options;
  options.kv_capacity_bytes = 64 * 1024;  // 64 tokens
  options.step_delay = 2ms;
  SchedulerOptions scheduler_options;
  scheduler_options.max_waiting = 1;
  BatchScheduler scheduler(std::make_unique<testing::FakeModelBackend>(options),
                           scheduler_options);
  Collector big;
  REQUIRE(scheduler.Submit(UserTurn("big", "", {}, std::string(100, 'x')), big.Callbacks()).ok());
  const Result r = big.Wait();
  CHECK(r.status.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(r.status.message()), Catch::Contains("KV budget"));

  // One slot in the wait queue: a second submission while one is preparing or waiting is
  // refused at once.
  Collector a;
  Collector b;
  TurnRequest ra = UserTurn("a", "", {}, "q");
  ra.sampling.max_tokens = 4;
  REQUIRE(scheduler.Submit(std::move(ra), a.Callbacks()).ok());
  TurnRequest rb = UserTurn("b", "", {}, "q");
  rb.sampling.max_tokens = 4;
  const Status s = scheduler.Submit(std::move(rb), b.Callbacks());
  if (!s.ok()) {
    CHECK(s.code() == absl::StatusCode::kResourceExhausted);
    CHECK_THAT(std::string(s.message()), Catch::Contains("wait queue full"));
  } else {
    b.Wait();  // `a` was admitted before `b` came: nothing was queued
  }
  CHECK(a.Wait().status.ok());
}

TEST_CASE("drain refuses new turns, cancels what outlives the grace period, flushes KV",
          "[unit][server]") {
  testing::FakeModelOptions options;
  options.step_delay = 5ms;
  auto backend = std::make_unique<testing::FakeModelBackend>(options);
  auto* fake = backend.get();
  BatchScheduler scheduler(std::move(backend), {});
  Collector c;
  REQUIRE(scheduler.Submit(UserTurn("t1", "s", {}, "long"), c.Callbacks()).ok());
  c.WaitForDeltas(1);
  scheduler.Drain(Clock::now() + 10ms);
  const Result r = c.Wait();
  CHECK(r.status.code() == absl::StatusCode::kUnavailable);
  CHECK(fake->flushes() == 1);
  Collector late;
  const Status s = scheduler.Submit(UserTurn("t2", "s", {}, "late"), late.Callbacks());
  CHECK(s.code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace framezip::server
