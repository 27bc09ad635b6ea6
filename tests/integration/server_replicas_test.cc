// Two real framezip-server processes (the shipped model) behind one session: they share sessions
// through the KV store (server/shared_sessions.h), so turn 1 on replica A and turn 2 on replica B
// gives the answer one server gives, B restoring A's KV instead of re-encoding the video. Once
// with one framezip-kvstore, once with each replica's embedded store over one Redis.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>

#include "tests/integration/kvstore_harness.h"
#include "tests/integration/server_process.h"
#include "tests/integration/server_test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace framezip::testing {
namespace {

using namespace std::chrono_literals;

struct TwoTurns {
  TurnResult first, second, third;
};

// Session created and video uploaded on `a`; turn 1 on `a`, turn 2 on `b`, turn 3 on `a` again.
TwoTurns RunAcross(ServerProcess& a, ServerProcess& b, const std::string& clip) {
  ChatClient on_a(a.Stub()), on_b(b.Stub());
  v1::CreateSessionRequest create;
  create.set_session_id("roaming");
  create.mutable_frames()->set_num_frames(4);
  create.mutable_sampling()->set_max_tokens(12);
  v1::Session session;
  REQUIRE(on_a.CreateSession(create, &session).error_message() == "");
  v1::Media media;
  REQUIRE(on_a.Upload("roaming", clip, &media).error_message() == "");
  TwoTurns out;
  out.first = on_a.Ask("roaming", "What moves?");
  out.second = on_b.Ask("roaming", "And then?");
  out.third = on_a.Ask("roaming", "What color is it?");
  return out;
}

void CheckRoaming(const TwoTurns& roaming, const TwoTurns& single) {
  REQUIRE(roaming.first.status.error_message() == "");
  REQUIRE(roaming.second.status.error_message() == "");
  REQUIRE(roaming.third.status.error_message() == "");
  REQUIRE(roaming.second.stats);
  REQUIRE(roaming.third.stats);
  // Replica B restored A's KV from the store: the video and turn 1 are cached, not re-encoded.
  CHECK(roaming.second.stats->cached_tokens() >= roaming.first.stats->prompt_tokens());
  CHECK(roaming.second.stats->prefilled_tokens() < 20);
  CHECK(roaming.second.stats->visual_tokens_before_pruning() == 0);
  CHECK(roaming.second.stats->kv_restore_seconds() > 0);
  // Back on A: it adopts B's revision (turn 2) and restores the store's KV.
  CHECK(roaming.third.stats->cached_tokens() >= roaming.second.stats->prompt_tokens());
  // The same answers as one server gives (greedy).
  CHECK(roaming.first.text == single.first.text);
  CHECK(roaming.second.text == single.second.text);
  CHECK(roaming.third.text == single.third.text);
}

TEST_CASE("two replicas share a session through one framezip-kvstore",
          "[integration][server][replicas]") {
  TempDir dir;
  const std::string clip = MakeTestClip(dir.path(), 1.0);
  // One server alone: the reference answers.
  TwoTurns single;
  {
    ServerProcess alone(dir.path(), "alone", {"--kvstore", "none"});
    single = RunAcross(alone, alone, clip);
  }
  std::filesystem::create_directories(dir.path() / "kvstore");
  kvstore::test::KvstoreDaemon kvstore(dir.path() / "kvstore", {});
  REQUIRE(kvstore.running());
  std::filesystem::create_directories(dir.path() / "media");
  const std::vector<std::string> shared = {"--kvstore", kvstore.address(), "--media-dir",
                                           (dir.path() / "media").string()};
  ServerProcess a(dir.path(), "a", shared);
  ServerProcess b(dir.path(), "b", shared);
  CheckRoaming(RunAcross(a, b, clip), single);

  // Deleted on B, gone on A too.
  ChatClient on_a(a.Stub()), on_b(b.Stub());
  v1::DeleteSessionResponse freed;
  REQUIRE(on_b.DeleteSession("roaming", &freed).ok());
  CHECK(on_a.Ask("roaming", "Still there?").status.error_code() == grpc::StatusCode::NOT_FOUND);
  // Another principal never finds it: here, the ids are per principal and it is gone anyway;
  // a fresh session of the same id starts from nothing.
  v1::CreateSessionRequest create;
  create.set_session_id("roaming");
  v1::Session session;
  REQUIRE(on_a.CreateSession(create, &session).ok());
  const TurnResult fresh = on_b.Ask("roaming", "Hello?");
  REQUIRE(fresh.status.ok());
  CHECK(fresh.stats->cached_tokens() == 0);
}

TEST_CASE("two replicas share a session through their embedded stores' Redis tier",
          "[integration][server][replicas]") {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "redis");
  kvstore::test::RedisServer redis(dir.path() / "redis");
  REQUIRE(redis.running());
  const std::string clip = MakeTestClip(dir.path(), 1.0);
  TwoTurns single;
  {
    ServerProcess alone(dir.path(), "alone", {"--kvstore", "none"});
    single = RunAcross(alone, alone, clip);
  }
  std::filesystem::create_directories(dir.path() / "media");
  const std::vector<std::string> shared = {"--kvstore-redis", redis.address(), "--media-dir",
                                           (dir.path() / "media").string()};
  ServerProcess a(dir.path(), "a", shared);
  ServerProcess b(dir.path(), "b", shared);
  CheckRoaming(RunAcross(a, b, clip), single);
}

}  // namespace
}  // namespace framezip::testing
