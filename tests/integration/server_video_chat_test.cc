// End-to-end tests of framezip.v1.VideoChat against the real server (VideoChatServer: the gRPC
// layer, sessions, scheduler, metrics, auth) on 127.0.0.1:0, with the deterministic fake model
// (a TEST DOUBLE, tests/integration/server_fake_model_backend.h) in place of the engine.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/core/device_health.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/integration/server_test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace framezip::testing {
namespace {

using namespace std::chrono_literals;

std::string HealthOf(const std::string& address, const std::string& service = "") {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 5s);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return "error: " + status.error_message();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

void AddText(v1::Message* m, v1::Role role, const std::string& text) {
  m->set_role(role);
  m->add_content()->set_text(text);
}

TEST_CASE("turn 2 reuses turn 1's KV and answers as a fresh request with the same history",
          "[integration][server]") {
  TempDir dir;
  InProcessServer server(TestConfig());
  ChatClient client(server.Stub());
  const std::string clip = MakeTestClip(dir.path());
  const std::string session = client.NewSession("You are terse.");
  v1::Media media;
  const grpc::Status uploaded = client.Upload(session, clip, &media);
  REQUIRE(uploaded.error_message() == "");
  CHECK(media.kind() == v1::MEDIA_KIND_VIDEO);
  CHECK(media.width() == 64);
  CHECK(media.height() == 48);
  CHECK(media.content_hash().size() == 64);
  CHECK(media.visual_tokens() > 0);
  CHECK(media.frame_timestamps_size() > 0);

  const TurnResult t1 = client.Ask(session, "What moves?");
  REQUIRE(t1.status.error_message() == "");
  REQUIRE(t1.stats);
  CHECK(t1.deltas > 1);
  CHECK(t1.messages_after_stats == 0);
  CHECK(t1.stats->cached_tokens() == 0);
  CHECK(t1.stats->visual_tokens_before_pruning() == media.visual_tokens());
  CHECK(t1.text.rfind("You said 'What moves?'", 0) == 0);

  const TurnResult t2 = client.Ask(session, "And then?");
  REQUIRE(t2.status.ok());
  REQUIRE(t2.stats);
  // Everything of turn 1 is restored; only turn 2's text is prefilled.
  CHECK(t2.stats->cached_tokens() == t1.stats->prompt_tokens() + t1.stats->generated_tokens());
  CHECK(t2.stats->prefilled_tokens() == t2.stats->prompt_tokens() - t2.stats->cached_tokens());
  CHECK(t2.stats->prefilled_tokens() < 20);
  REQUIRE(t2.stats->kv_bytes_size() == 1);
  CHECK(t2.stats->kv_bytes(0).tier() == v1::KV_TIER_DEVICE);

  // A fresh, stateless request with the same history (same media bytes) gives the same answer.
  v1::GenerateRequest fresh;
  auto* inline_media = fresh.add_media();
  inline_media->set_media_id("video");
  inline_media->set_mime_type("video/mp4");
  inline_media->set_data(clip);
  AddText(fresh.add_messages(), v1::ROLE_SYSTEM, "You are terse.");
  auto* user1 = fresh.add_messages();
  user1->set_role(v1::ROLE_USER);
  user1->add_content()->set_media_id("video");
  user1->add_content()->set_text("What moves?");
  AddText(fresh.add_messages(), v1::ROLE_ASSISTANT, t1.text);
  AddText(fresh.add_messages(), v1::ROLE_USER, "And then?");
  const TurnResult g = client.Generate(fresh);
  REQUIRE(g.status.error_message() == "");
  REQUIRE(g.stats);
  CHECK(g.stats->cached_tokens() == 0);
  CHECK(g.text == t2.text);

  v1::Session state;
  REQUIRE(client.GetSession(session, &state).ok());
  CHECK(state.turns() == 2);
  CHECK(state.messages_size() == 5);  // system, user, assistant, user, assistant
  CHECK(state.media_size() == 1);
  CHECK(state.cached_tokens() == t2.stats->prompt_tokens() + t2.stats->generated_tokens());
  CHECK_FALSE(state.turn_running());

  // Metrics on their own port, with vLLM-style names.
  const std::string metrics = HttpGet(server.server().metrics_port(), "/metrics");
  CHECK_THAT(metrics, Catch::Contains("framezip_time_to_first_token_seconds_count"));
  CHECK_THAT(metrics, Catch::Contains("framezip_prefix_cache_hits_total"));
  CHECK_THAT(metrics, Catch::Contains("framezip_kv_cache_usage_ratio"));
  CHECK_THAT(metrics, Catch::Contains("framezip_frames_sampled_total"));

  // Delete frees the session's KV and its media.
  v1::DeleteSessionResponse deleted;
  REQUIRE(client.DeleteSession(session, &deleted).ok());
  REQUIRE(deleted.freed_size() == 1);
  CHECK(deleted.freed(0).bytes() > 0);
  CHECK(server.fake().KvUsedBytes() == 0);
  CHECK(client.GetSession(session, &state).error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(WaitUntil([&] {
    return !std::filesystem::exists(server.server().media_dir() / session);
  }));
}

TEST_CASE("eight concurrent sessions get their own answers, batched together",
          "[integration][server]") {
  FakeModelOptions model;
  model.step_delay = 1ms;
  InProcessServer server(TestConfig(), model);
  constexpr int kSessions = 8;
  std::vector<TurnResult> first(kSessions);
  std::vector<TurnResult> second(kSessions);
  std::vector<std::string> ids(kSessions);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < kSessions; ++i) {
      threads.emplace_back([&, i] {
        ChatClient client(server.Stub());
        v1::CreateSessionRequest request;
        request.set_session_id(fmt::format("concurrent-{}", i));
        v1::Session session;
        if (!client.CreateSession(request, &session).ok()) return;
        ids[i] = session.session_id();
        first[i] = client.Ask(ids[i], fmt::format("question {}", i));
        second[i] = client.Ask(ids[i], fmt::format("follow-up {}", i));
      });
    }
    for (auto& t : threads) t.join();
  }
  ChatClient client(server.Stub());
  for (int i = 0; i < kSessions; ++i) {
    REQUIRE(first[i].status.ok());
    REQUIRE(second[i].status.ok());
    CHECK(first[i].text.rfind(fmt::format("You said 'question {}'", i), 0) == 0);
    CHECK(second[i].text.rfind(fmt::format("You said 'follow-up {}'", i), 0) == 0);
    CHECK(second[i].stats->cached_tokens() > 0);
    // The same history asked alone gives the same answer: nothing was mixed between sessions.
    v1::GenerateRequest alone;
    AddText(alone.add_messages(), v1::ROLE_USER, fmt::format("question {}", i));
    AddText(alone.add_messages(), v1::ROLE_ASSISTANT, first[i].text);
    AddText(alone.add_messages(), v1::ROLE_USER, fmt::format("follow-up {}", i));
    CHECK(client.Generate(alone).text == second[i].text);
  }
  CHECK(server.fake().largest_batch() >= 2);
}

TEST_CASE("cancelling a stream mid-answer frees the turn's pages", "[integration][server]") {
  FakeModelOptions model;
  model.step_delay = 3ms;
  InProcessServer server(TestConfig(), model);
  ChatClient client(server.Stub());
  const std::string session = client.NewSession();
  REQUIRE(client.Ask(session, "warm up").status.ok());
  const uint64_t kept = server.fake().KvUsedBytes();
  REQUIRE(kept > 0);

  v1::ChatRequest request;
  request.set_session_id(session);
  request.set_text("tell me a long story");
  const TurnResult r = client.Chat(request, [](grpc::ClientContext& context, int index) {
    if (index == 2) context.TryCancel();
  });
  CHECK(r.status.error_code() == grpc::StatusCode::CANCELLED);
  CHECK_FALSE(r.stats);
  // The engine drops the turn within a step: no live sequence, the session keeps only turn 1.
  CHECK(WaitUntil([&] {
    return server.fake().live_sequences() == 0 && server.server().engine().Load().running == 0;
  }));
  CHECK(server.fake().KvUsedBytes() == kept);
  v1::Session state;
  CHECK(WaitUntil([&] { return client.GetSession(session, &state).ok() && !state.turn_running(); }));
  CHECK(state.turns() == 1);
  // The gauges say the same.
  CHECK(WaitUntil([&] {
    const std::string m = HttpGet(server.server().metrics_port(), "/metrics");
    return m.find("framezip_num_requests_running{model_name=\"fake-test-model\"} 0") !=
           std::string::npos;
  }));
  // And the session takes a new turn.
  CHECK(client.Ask(session, "shorter, please").status.ok());
}

TEST_CASE("a passed deadline ends the turn with DEADLINE_EXCEEDED and frees its pages",
          "[integration][server]") {
  FakeModelOptions model;
  model.step_delay = 3ms;
  InProcessServer server(TestConfig(), model);
  ChatClient client(server.Stub());
  const std::string session = client.NewSession();
  v1::ChatRequest request;
  request.set_session_id(session);
  request.set_text("slow answer");
  const TurnResult r = client.Chat(request, {}, 60ms);
  CHECK(r.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(WaitUntil([&] { return server.fake().live_sequences() == 0; }));
  CHECK(server.fake().KvUsedBytes() == 0);
}

TEST_CASE("uploads: size limits, corrupt media, protocol errors", "[integration][server]") {
  TempDir dir;
  server::ServerConfig config = TestConfig();
  config.max_upload_bytes = 200 * 1024;
  InProcessServer server(config);
  ChatClient client(server.Stub());
  const std::string session = client.NewSession();
  const std::string clip = MakeTestClip(dir.path());
  REQUIRE(clip.size() < 200 * 1024);
  v1::Media media;

  SECTION("declared size over the limit") {
    const grpc::Status s = client.Upload(session, clip, &media, uint64_t{10} << 20);
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK_THAT(s.error_message(), Catch::Contains("declared_size_bytes"));
  }
  SECTION("more bytes than declared") {
    const grpc::Status s = client.Upload(session, clip, &media, clip.size() / 2);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::Contains("declared"));
  }
  SECTION("fewer bytes than declared") {
    const grpc::Status s = client.Upload(session, clip, &media, clip.size() + 10);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("not a video") {
    const grpc::Status s = client.Upload(session, std::string(5000, 'x'), &media);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_FALSE(s.error_message().empty());
  }
  SECTION("a corrupt video") {
    std::string corrupt = clip;
    for (size_t i = 0; i < 256 && i < corrupt.size(); ++i) corrupt[i] = static_cast<char>(i * 7);
    const grpc::Status s = client.Upload(session, corrupt, &media);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("unknown session") {
    const grpc::Status s = client.Upload("no-such-session", clip, &media);
    CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  }
  v1::Session state;
  REQUIRE(client.GetSession(session, &state).ok());
  CHECK(state.media_size() == 0);
}

TEST_CASE("status codes at the edge follow docs/api.md's table", "[integration][server]") {
  FakeModelOptions model;
  model.step_delay = 2ms;
  InProcessServer server(TestConfig(), model);
  ChatClient client(server.Stub());
  v1::Session session;

  SECTION("unknown session") {
    CHECK(client.Ask("missing", "hi").status.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK(client.GetSession("missing", &session).error_code() == grpc::StatusCode::NOT_FOUND);
    v1::DeleteSessionResponse deleted;
    CHECK(client.DeleteSession("missing", &deleted).error_code() == grpc::StatusCode::NOT_FOUND);
  }
  SECTION("invalid arguments name the field") {
    const std::string id = client.NewSession();
    const TurnResult empty = client.Ask(id, "");
    CHECK(empty.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(empty.status.error_message(), Catch::StartsWith("text"));
    v1::CreateSessionRequest bad;
    bad.mutable_sampling()->set_top_p(1.5f);
    const grpc::Status s = client.CreateSession(bad, &session);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::StartsWith("sampling.top_p"));
    v1::CreateSessionRequest bad_id;
    bad_id.set_session_id("a/b");
    CHECK(client.CreateSession(bad_id, &session).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
    v1::ChatRequest unknown_media;
    unknown_media.set_session_id(id);
    unknown_media.set_text("look");
    unknown_media.add_content()->set_media_id("nope");
    CHECK(client.Chat(unknown_media).status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("an unknown model is NOT_FOUND, a reused id ALREADY_EXISTS") {
    v1::CreateSessionRequest request;
    request.set_model("gpt-5");
    CHECK(client.CreateSession(request, &session).error_code() == grpc::StatusCode::NOT_FOUND);
    request.set_model("");
    request.set_session_id("mine");
    CHECK(client.CreateSession(request, &session).ok());
    CHECK(client.CreateSession(request, &session).error_code() ==
          grpc::StatusCode::ALREADY_EXISTS);
  }
  SECTION("one turn at a time per session") {
    const std::string id = client.NewSession();
    std::optional<TurnResult> second;
    v1::ChatRequest request;
    request.set_session_id(id);
    request.set_text("first");
    const TurnResult first = client.Chat(request, [&](grpc::ClientContext&, int index) {
      if (index == 0) second = client.Ask(id, "second");
    });
    CHECK(first.status.ok());
    REQUIRE(second);
    CHECK(second->status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  }
  SECTION("model info") {
    grpc::ClientContext context;
    v1::GetModelInfoRequest request;
    v1::ModelInfo info;
    REQUIRE(server.Stub()->GetModelInfo(&context, request, &info).ok());
    CHECK(info.model() == "fake-test-model");
    CHECK(info.context_tokens() > 0);
    CHECK(info.weight_format() == "bf16");
  }
  SECTION("list sessions pages through them oldest first") {
    for (int i = 0; i < 5; ++i) client.NewSession();
    std::vector<std::string> seen;
    std::string token;
    do {
      grpc::ClientContext context;
      v1::ListSessionsRequest request;
      request.set_page_size(2);
      request.set_page_token(token);
      v1::ListSessionsResponse response;
      REQUIRE(server.Stub()->ListSessions(&context, request, &response).ok());
      for (const auto& s : response.sessions()) seen.push_back(s.session_id());
      token = response.next_page_token();
    } while (!token.empty());
    CHECK(seen.size() == 5);
    grpc::ClientContext context;
    v1::ListSessionsRequest forged;
    forged.set_page_token("1.2");
    v1::ListSessionsResponse response;
    CHECK(server.Stub()->ListSessions(&context, forged, &response).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_CASE("the wait queue and the KV budget give RESOURCE_EXHAUSTED", "[integration][server]") {
  FakeModelOptions model;
  model.kv_capacity_bytes = 64 * 1024;  // 64 tokens of the fake
  InProcessServer server(TestConfig(), model);
  ChatClient client(server.Stub());
  const std::string id = client.NewSession();
  const TurnResult r = client.Ask(id, std::string(200, 'x'));
  CHECK(r.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(r.status.error_message(), Catch::Contains("KV budget"));
  // The failed turn left the session usable and unchanged.
  v1::Session state;
  REQUIRE(client.GetSession(id, &state).ok());
  CHECK(state.turns() == 0);
  CHECK_FALSE(state.turn_running());
}

TEST_CASE("bearer-token auth: off by default, enforced with a token file",
          "[integration][server]") {
  TempDir dir;
  SECTION("off") {
    InProcessServer server(TestConfig());
    ChatClient client(server.Stub());
    v1::Session session;
    CHECK(client.CreateSession({}, &session).ok());
  }
  SECTION("on") {
    std::ofstream(dir / "tokens") << "# tokens\nsecret-1\n\nsecret-2\n";
    server::ServerConfig config = TestConfig();
    config.auth_token_file = (dir / "tokens").string();
    InProcessServer server(config);
    v1::Session session;
    ChatClient anonymous(server.Stub());
    const grpc::Status none = anonymous.CreateSession({}, &session);
    CHECK(none.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    ChatClient wrong(server.Stub(), "secret-3");
    CHECK(wrong.CreateSession({}, &session).error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(wrong.Ask("x", "hi").status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    ChatClient right(server.Stub(), "secret-2");
    REQUIRE(right.CreateSession({}, &session).ok());
    CHECK(right.Ask(session.session_id(), "hi").status.ok());
    // Health stays open for load balancers.
    CHECK(HealthOf(server.address()) == "SERVING");
  }
}

TEST_CASE("a sticky device error turns health NOT_SERVING", "[integration][server]") {
  InProcessServer server(TestConfig(), FakeModelOptions{});
  CHECK(HealthOf(server.address()) == "SERVING");
  engine::MarkDeviceUnhealthy("cudaErrorIllegalAddress in a test");
  const bool flipped = WaitUntil([&] { return HealthOf(server.address()) == "NOT_SERVING"; });
  const std::string service_health = HealthOf(server.address(), "framezip.v1.VideoChat");
  engine::ResetDeviceHealthForTesting();
  CHECK(flipped);
  CHECK(service_health == "NOT_SERVING");
}

TEST_CASE("drain: health NOT_SERVING, new turns UNAVAILABLE, the running turn finishes",
          "[integration][server]") {
  FakeModelOptions model;
  model.step_delay = 10ms;  // the turn outlives the health check and the refused turn
  InProcessServer server(TestConfig(), model);
  ChatClient client(server.Stub());
  const std::string id = client.NewSession();
  const std::string other = client.NewSession();
  CHECK(HealthOf(server.address(), "framezip.v1.VideoChat") == "SERVING");
  std::thread drainer;
  std::string health_during;
  TurnResult refused;
  v1::ChatRequest request;
  request.set_session_id(id);
  request.set_text("finish me");
  const TurnResult running = client.Chat(request, [&](grpc::ClientContext&, int index) {
    if (index != 0) return;
    drainer = std::thread([&] { server.server().Drain(10s); });
    REQUIRE(WaitUntil([&] {
      health_during = HealthOf(server.address());
      return health_during == "NOT_SERVING";
    }));
    refused = client.Ask(other, "too late");
  });
  drainer.join();
  CHECK(health_during == "NOT_SERVING");
  CHECK(refused.status.error_code() == grpc::StatusCode::UNAVAILABLE);
  REQUIRE(running.status.ok());
  CHECK(running.stats);
  CHECK(server.fake().flushes() == 1);
}

}  // namespace
}  // namespace framezip::testing

namespace framezip::testing {
namespace {

TEST_CASE("TLS: the server serves over TLS with the given certificate", "[integration][server]") {
  TempDir dir;
  const int made = RunCommand(
      {"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
       "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout",
       (dir / "key.pem").string(), "-out", (dir / "cert.pem").string()},
      dir / "openssl.log");
  REQUIRE(made == 0);
  server::ServerConfig config = TestConfig();
  config.tls_cert_file = (dir / "cert.pem").string();
  config.tls_key_file = (dir / "key.pem").string();
  InProcessServer server(config);
  std::ifstream in(dir / "cert.pem");
  std::ostringstream cert;
  cert << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = cert.str();
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("localhost");
  ChatClient secure(v1::VideoChat::NewStub(
      grpc::CreateCustomChannel(server.address(), grpc::SslCredentials(ssl), args)));
  const std::string id = secure.NewSession();
  CHECK(secure.Ask(id, "over TLS").status.ok());
  // A plaintext client cannot talk to it.
  ChatClient plain(server.Stub());
  v1::Session session;
  CHECK_FALSE(plain.CreateSession({}, &session).ok());
}

}  // namespace
}  // namespace framezip::testing
