// Two real framezip-server processes (the shipped model) behind one session: they share sessions
// through the KV store (server/shared_sessions.h), so turn 1 on replica A and turn 2 on replica B
// gives the answer one server gives, B restoring A's KV instead of re-encoding the video. Once
// with one framezip-kvstore, once with each replica's embedded store over one Redis; and once for
// a conversation resent in full over the OpenAI API (kept as a session,
// server/conversation_reuse.h).
#include <absl/strings/escaping.h>
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/integration/http_test_client.h"
#include "tests/integration/kvstore_harness.h"
#include "tests/integration/server_process.h"
#include "tests/integration/server_test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace framezip::testing {
namespace {

using namespace std::chrono_literals;

// Flags that turn on a replica's OpenAI API, its port written beside the gRPC one.
std::vector<std::string> OpenAiArgs(const std::filesystem::path& dir, const std::string& name,
                                    std::vector<std::string> args) {
  args.insert(args.end(), {"--openai-listen", "127.0.0.1:0", "--openai-port-file",
                           (dir / (name + ".openai-port")).string()});
  return args;
}

struct HttpTurn {
  std::string answer;
  int prompt_tokens = 0;
  int cached_tokens = 0;
};

// A three-turn conversation about `clip` over the OpenAI API, resent in full each turn, the
// turns sent to `replicas[0]`, `replicas[1]`, `replicas[2]`.
std::vector<HttpTurn> HttpConversation(const std::vector<const ServerProcess*>& replicas,
                                       const std::string& clip) {
  using nlohmann::json;
  const std::vector<std::string> questions = {"What moves?", "And then?", "What color is it?"};
  json messages = json::array();
  std::vector<HttpTurn> turns;
  for (size_t i = 0; i < questions.size(); ++i) {
    json text = json::object();
    text["type"] = "text";
    text["text"] = questions[i];
    json content = json::array();
    if (i == 0) {
      json video = json::object();
      video["type"] = "video_url";
      video["video_url"]["url"] = "data:video/mp4;base64," + absl::Base64Escape(clip);
      content.push_back(video);
    }
    content.push_back(text);
    messages.push_back({{"role", "user"}, {"content", content}});
    HttpCall call;
    call.body = json({{"messages", messages},
                      {"max_tokens", 12},
                      {"temperature", 0},
                      {"framezip", {{"frames", {{"num_frames", 32}}}}}})
                    .dump();
    const HttpReply reply = Http(replicas[i]->openai_port(), call);
    INFO(reply.body);
    REQUIRE(reply.status == 200);
    const json answer = json::parse(reply.body);
    HttpTurn turn;
    turn.answer = answer["choices"][0]["message"]["content"];
    turn.prompt_tokens = answer["usage"]["prompt_tokens"];
    turn.cached_tokens = answer["usage"]["prompt_tokens_details"]["cached_tokens"];
    messages.push_back({{"role", "assistant"}, {"content", turn.answer}});
    turns.push_back(turn);
  }
  return turns;
}

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

TEST_CASE("two replicas reuse each other's OpenAI API conversations through one kvstore",
          "[integration][server][replicas][openai]") {
  TempDir dir;
  const std::string clip = MakeTestClip(dir.path(), 4.0);  // 40 frames: 32 are sampled
  std::vector<HttpTurn> single;
  {
    ServerProcess alone(dir.path(), "alone",
                        OpenAiArgs(dir.path(), "alone", {"--kvstore", "none"}));
    single = HttpConversation({&alone, &alone, &alone}, clip);
  }
  std::filesystem::create_directories(dir.path() / "kvstore");
  kvstore::test::KvstoreDaemon kvstore(dir.path() / "kvstore", {});
  REQUIRE(kvstore.running());
  std::filesystem::create_directories(dir.path() / "media");
  const std::vector<std::string> shared = {"--kvstore", kvstore.address(), "--media-dir",
                                           (dir.path() / "media").string()};
  ServerProcess a(dir.path(), "a", OpenAiArgs(dir.path(), "a", shared));
  ServerProcess b(dir.path(), "b", OpenAiArgs(dir.path(), "b", shared));
  // Turn 1 on A, turn 2 on B (it restores A's KV from the store), turn 3 on A again.
  const std::vector<HttpTurn> roaming = HttpConversation({&a, &b, &a}, clip);
  for (size_t i = 0; i < roaming.size(); ++i) {
    INFO("turn " << i + 1 << ": one server cached " << single[i].cached_tokens << " of "
                 << single[i].prompt_tokens << "\nA: " << ServerProcess::Log(dir.path() / "a.log")
                 << "\nB: " << ServerProcess::Log(dir.path() / "b.log"));
    CHECK(roaming[i].answer == single[i].answer);
    CHECK(roaming[i].prompt_tokens == single[i].prompt_tokens);
    CHECK(roaming[i].cached_tokens == single[i].cached_tokens);
    if (i > 0) CHECK(roaming[i].cached_tokens >= roaming[i].prompt_tokens * 9 / 10);
  }
  CHECK(roaming[0].cached_tokens == 0);
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
