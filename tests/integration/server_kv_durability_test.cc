// Durability of sessions' KV after the store loses it, with real processes: a framezip-server
// (the shipped model) whose sessions live in a framezip-kvstore that is killed during a turn and
// restarted empty, and, in the second case, a framezip-kvstore whose only tier is a Redis that is
// killed and restarted empty. After the restart the server finds every session's chain gone
// (framezip_kv_chains_lost_total, the log) and, without any new turn, commits each whole again:
// the store holds their blocks, every session is durable and the gauge of non-durable sessions
// is back to 0; later turns commit on top, and a new replica restores every session from the
// store with the answer one server without a store gives. And a store that answers every Put late: commits wait in the
// bounded queue off the step thread, overflow is deferred (counted), and the drain writes all.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <thread>

#include "kvstore/service/remote_store.h"
#include "tests/integration/kvstore_harness.h"
#include "tests/integration/server_process.h"
#include "tests/integration/server_test_util.h"
#include "tests/testing/temp_dir.h"

namespace framezip::testing {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kSessions = {"lost-1", "lost-2", "lost-3"};
// Asked of every session, in order: before the loss, after it (the commit that must make it
// durable again), then on a new replica. lost-1 also asks kDuring while the store goes away.
constexpr const char* kBefore = "What moves?";
constexpr const char* kDuring = "And then?";
constexpr const char* kAfter = "What color is it?";
constexpr const char* kOnNewReplica = "Where does it go?";

struct Answers {
  std::map<std::string, std::vector<std::string>> text;  // by session, in the order asked
};

void CreateWithClip(ChatClient& client, const std::string& id, const std::string& clip) {
  v1::CreateSessionRequest create;
  create.set_session_id(id);
  create.mutable_frames()->set_num_frames(4);
  create.mutable_sampling()->set_max_tokens(10);
  v1::Session session;
  REQUIRE(client.CreateSession(create, &session).error_message() == "");
  v1::Media media;
  REQUIRE(client.Upload(id, clip, &media).error_message() == "");
}

std::string AskOk(ChatClient& client, const std::string& id, const std::string& text) {
  const TurnResult r = client.Ask(id, text);
  INFO("session " << id << ", question '" << text << "'");
  REQUIRE(r.status.error_message() == "");
  return r.text;
}

// The reference: one server without a store, the same questions.
Answers Reference(const std::filesystem::path& dir, const std::string& clip) {
  ServerProcess alone(dir, "alone", {"--kvstore", "none"});
  ChatClient client(alone.Stub());
  Answers out;
  for (const std::string& id : kSessions) {
    CreateWithClip(client, id, clip);
    out.text[id].push_back(AskOk(client, id, kBefore));
    if (id == kSessions[0]) out.text[id].push_back(AskOk(client, id, kDuring));
    out.text[id].push_back(AskOk(client, id, kAfter));
    out.text[id].push_back(AskOk(client, id, kOnNewReplica));
  }
  return out;
}

std::unique_ptr<kvstore::service::RemoteStore> Client(const std::string& address) {
  auto client = kvstore::service::RemoteStore::Connect(
      {.address = address, .timeout = 10s, .connect_timeout = 10s});
  REQUIRE(client.ok());
  return std::move(client).value();
}

double ChainsLost(const ServerProcess& server) {
  const std::string metrics = HttpGet(server.metrics_port(), "/metrics");
  const auto v = kvstore::test::MetricValue(metrics, "framezip_kv_chains_lost_total{");
  return v ? *v : -1;
}

double NotDurable(const ServerProcess& server) {
  const std::string metrics = HttpGet(server.metrics_port(), "/metrics");
  const auto v = kvstore::test::MetricValue(metrics, "framezip_sessions_not_durable{");
  return v ? *v : -1;
}

v1::KvDurability Durability(ChatClient& client, const std::string& id) {
  v1::Session session;
  REQUIRE(client.GetSession(id, &session).ok());
  return session.kv_durability();
}

// The scenario, with `lose_store` emptying the store during lost-1's turn and `store_blocks`
// counting what the store holds.
void RunLoss(const std::filesystem::path& dir, const std::string& clip, const Answers& reference,
             const std::string& store_address, const std::function<void()>& lose_store,
             const std::function<uint64_t()>& store_blocks) {
  std::filesystem::create_directories(dir / "media");
  const std::vector<std::string> args = {"--kvstore",         store_address,
                                         "--media-dir",       (dir / "media").string(),
                                         "--housekeeping-ms", "200"};
  ServerProcess a(dir, "a", args);
  REQUIRE(a.metrics_port() > 0);
  ChatClient on_a(a.Stub());
  Answers got;
  for (const std::string& id : kSessions) {
    CreateWithClip(on_a, id, clip);
    got.text[id].push_back(AskOk(on_a, id, kBefore));
    CHECK(Durability(on_a, id) == v1::KV_DURABILITY_DURABLE);
  }
  CHECK(NotDurable(a) == 0);
  const uint64_t blocks_before = store_blocks();
  CHECK(blocks_before >= kSessions.size());

  // The store loses everything while lost-1's turn runs.
  bool lost = false;
  v1::ChatRequest during;
  during.set_session_id(kSessions[0]);
  during.add_content()->set_text(kDuring);
  const TurnResult r = on_a.Chat(during, [&](grpc::ClientContext&, int delta) {
    if (delta == 0 && !lost) {
      lose_store();
      lost = true;
    }
  });
  REQUIRE(lost);
  REQUIRE(r.status.error_message() == "");
  got.text[kSessions[0]].push_back(r.text);

  // The server notices that the store lost the idle sessions' KV (lost-1's own commit finds its
  // chain gone too) and commits each session whole again, with no turn asking it to: every
  // session durable, their blocks back in the store, the gauge at 0.
  CHECK(WaitUntil([&] { return ChainsLost(a) >= 2; }, 20s));
  INFO("server log: " << a.Log());
  CHECK(a.Log().find("its KV is no longer in the store") != std::string::npos);
  CHECK(WaitUntil(
      [&] {
        for (const std::string& id : kSessions) {
          if (Durability(on_a, id) != v1::KV_DURABILITY_DURABLE) return false;
        }
        return NotDurable(a) == 0;
      },
      20s));
  CHECK(store_blocks() >= kSessions.size());
  CHECK(a.Log().find("durable again") != std::string::npos);

  // A turn each: its commit goes on top of the chain written again.
  for (const std::string& id : kSessions) {
    const uint64_t blocks = store_blocks();
    got.text[id].push_back(AskOk(on_a, id, kAfter));
    CHECK(WaitUntil([&] { return Durability(on_a, id) == v1::KV_DURABILITY_DURABLE; }, 10s));
    CHECK(store_blocks() > blocks);
  }
  CHECK(WaitUntil([&] { return NotDurable(a) == 0; }, 10s));

  // A new replica restores each session from the store alone: cached, and the same answers.
  ServerProcess b(dir, "b", args);
  ChatClient on_b(b.Stub());
  for (const std::string& id : kSessions) {
    const TurnResult t = on_b.Ask(id, kOnNewReplica);
    INFO("session " << id << " on the new replica; its log: " << b.Log());
    REQUIRE(t.status.error_message() == "");
    REQUIRE(t.stats);
    CHECK(t.stats->kv_restore_seconds() > 0);
    CHECK(t.stats->visual_tokens_before_pruning() == 0);  // the video was not encoded again
    CHECK(t.stats->prefilled_tokens() < 20);
    got.text[id].push_back(t.text);
  }
  for (const std::string& id : kSessions) {
    INFO("session " << id);
    CHECK(got.text[id] == reference.text.at(id));
  }
}

TEST_CASE("sessions are durable again one commit after framezip-kvstore restarts empty",
          "[integration][server][durability]") {
  TempDir dir;
  const std::string clip = MakeTestClip(dir.path(), 1.0);
  const Answers reference = Reference(dir.path(), clip);
  std::filesystem::create_directories(dir.path() / "kvstore");
  auto daemon = std::make_unique<kvstore::test::KvstoreDaemon>(dir.path() / "kvstore",
                                                               std::vector<std::string>{});
  REQUIRE(daemon->running());
  const std::string address = daemon->address();
  const int port = daemon->port();
  auto blocks = [&]() -> uint64_t {
    auto stats = Client(address)->Stats();
    REQUIRE(stats.ok());
    return stats->tiers.front().blocks;
  };
  auto restart_empty = [&] {
    daemon->Kill();
    daemon.reset();
    std::filesystem::create_directories(dir.path() / "kvstore-restarted");
    daemon = std::make_unique<kvstore::test::KvstoreDaemon>(dir.path() / "kvstore-restarted",
                                                            std::vector<std::string>{}, port);
    REQUIRE(daemon->running());
  };
  RunLoss(dir.path(), clip, reference, address, restart_empty, blocks);
}

TEST_CASE("sessions are durable again one commit after the store's Redis restarts empty",
          "[integration][server][durability]") {
  TempDir dir;
  const std::string clip = MakeTestClip(dir.path(), 1.0);
  const Answers reference = Reference(dir.path(), clip);
  std::filesystem::create_directories(dir.path() / "redis");
  kvstore::test::RedisServer redis(dir.path() / "redis");
  REQUIRE(redis.running());
  std::filesystem::create_directories(dir.path() / "kvstore");
  // Redis is the daemon's only tier: what Redis loses, the store loses.
  kvstore::test::KvstoreDaemon daemon(dir.path() / "kvstore",
                                      {"--kv-host-bytes", "0", "--kv-redis", redis.address()});
  REQUIRE(daemon.running());
  auto blocks = [&]() -> uint64_t {
    // Keys: one per block, plus one per chunk of each block.
    const std::string n = redis.Command({"DBSIZE"});
    return n.rfind("(error)", 0) == 0 ? 0 : std::stoull(n);
  };
  auto restart_empty = [&] {
    redis.Kill();
    REQUIRE(redis.Start());
    // Until the daemon's Redis tier has reconnected the store can take nothing (its only tier);
    // the tier tries again when it is used (after its backoff), so look a block up meanwhile.
    auto store = Client(daemon.address());
    const kvstore::BlockKey probe{};
    REQUIRE(WaitUntil(
        [&] {
          (void)store->Lookup(std::span<const kvstore::BlockKey>(&probe, 1));
          auto stats = store->Stats();
          if (!stats.ok()) return false;
          for (const auto& tier : stats->tiers) {
            if (tier.tier == kvstore::Tier::kRedis) return tier.available;
          }
          return false;
        },
        20s));
  };
  RunLoss(dir.path(), clip, reference, daemon.address(), restart_empty, blocks);
}

TEST_CASE("a slow store: commits queue off the step thread, overflow is deferred, drain flushes",
          "[integration][server][durability]") {
  TempDir dir;
  const std::string clip = MakeTestClip(dir.path(), 1.0);
  std::filesystem::create_directories(dir.path() / "kvstore");
  // Every Put answers 1.5 s late: a commit takes longer than the three turns together.
  kvstore::test::KvstoreDaemon daemon(dir.path() / "kvstore", {"--test-put-delay-ms", "1500"});
  REQUIRE(daemon.running());
  // Room for one waiting commit; not shared, so turns end without waiting for their commit.
  ServerProcess a(dir.path(), "slow",
                  {"--kvstore", daemon.address(), "--share-sessions", "off", "--kv-commit-queue",
                   "1", "--housekeeping-ms", "100"});
  ChatClient client(a.Stub());
  for (const std::string& id : kSessions) CreateWithClip(client, id, clip);
  // The three turns run together and end within a step or two of each other: one commit in
  // flight, one waiting, one deferred.
  std::vector<std::thread> turns;
  std::vector<TurnResult> results(kSessions.size());
  for (size_t i = 0; i < kSessions.size(); ++i) {
    turns.emplace_back([&, i] {
      ChatClient own(a.Stub());
      results[i] = own.Ask(kSessions[i], kBefore);
    });
  }
  for (auto& t : turns) t.join();
  for (const TurnResult& r : results) REQUIRE(r.status.error_message() == "");
  INFO("server log: " << a.Log());
  const auto deferred = [&] {
    return kvstore::test::MetricValue(HttpGet(a.metrics_port(), "/metrics"),
                                      "framezip_kv_commits_deferred_total{");
  };
  CHECK(WaitUntil([&] { return deferred().value_or(0) >= 1; }, 5s));
  CHECK(a.Log().find("KV commit queue full") != std::string::npos);
  // The deferred session stays behind the store (not durable) until its next commit or drain.
  int behind = 0;
  for (const std::string& id : kSessions) {
    if (Durability(client, id) != v1::KV_DURABILITY_DURABLE) ++behind;
  }
  CHECK(behind >= 1);
  // Drain: the queue is flushed and the deferred session committed: all three in the store.
  CHECK(a.Stop(60s) == 0);
  CHECK(a.Log().find("drain: session KV flushed to the store: 3 sessions") != std::string::npos);
}

}  // namespace
}  // namespace framezip::testing
