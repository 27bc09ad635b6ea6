// Untrusted input never crashes, leaks or starves the server: hostile and broken
// uploads, sessions re-created under a reused id, other principals' sessions, admission limits,
// oversized and out-of-range fields, stalled uploads and slow metrics clients — each against the
// real server (VideoChatServer on 127.0.0.1:0, real media workers) over the deterministic fake
// model (a TEST DOUBLE). The real model's side (context length, finish reasons, KV pressure) is
// in server_real_model_test.cc.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/integration/server_test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace framezip::testing {
namespace {

using namespace std::chrono_literals;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string Ffmpeg(const std::filesystem::path& dir, const std::string& name,
                   std::vector<std::string> args) {
  std::vector<std::string> argv = {"ffmpeg", "-hide_banner", "-loglevel", "error", "-y"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back((dir / name).string());
  REQUIRE(RunCommand(argv, dir / (name + ".log")) == 0);
  return ReadFile(dir / name);
}

// Resident memory of this process (the in-process server's), MiB.
double RssMiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

grpc::Status DeleteMedia(InProcessServer& server, const std::string& session,
                         const std::string& media, v1::DeleteMediaResponse* response,
                         const std::string& token = "") {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  v1::DeleteMediaRequest request;
  request.set_session_id(session);
  request.set_media_id(media);
  return server.Stub()->DeleteMedia(&context, request, response);
}

TEST_CASE("a decoder crash in a media worker fails that upload, the server keeps serving",
          "[integration][server]") {
  TempDir dir;
  server::ServerConfig config = TestConfig();
  // The fault-injecting worker (a TEST DOUBLE: the real worker, crashing on "FZFAULT:crash").
  config.media_worker = (BinaryDir() / "tests/media_fault_worker").string();
  InProcessServer server(config);
  ChatClient client(server.Stub());
  const std::string session = client.NewSession();
  v1::Media media;
  const grpc::Status crashed = client.Upload(session, "FZFAULT:crash\n", &media);
  CHECK(crashed.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(crashed.error_message(), Catch::Contains("crashed") && Catch::Contains("SIGSEGV"));
  const grpc::Status hung = client.Upload(session, "FZFAULT:garbage\n", &media);
  CHECK(hung.error_code() == grpc::StatusCode::INTERNAL);
  // Same server, same session: the next upload and turn work.
  const grpc::Status ok = client.Upload(session, MakeTestClip(dir.path()), &media);
  REQUIRE(ok.error_message() == "");
  CHECK(client.Ask(session, "What moves?").status.ok());
}

TEST_CASE("uploads every later turn would fail on are refused, and media can be deleted",
          "[integration][server]") {
  TempDir dir;
  InProcessServer server(TestConfig());
  ChatClient client(server.Stub());
  const std::string session = client.NewSession();
  v1::Media media;

  SECTION("the first half of a faststart mp4") {
    const std::string whole = Ffmpeg(dir.path(), "fast.mp4",
                                     {"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=4", "-c:v",
                                      "libx264", "-movflags", "+faststart"});
    const grpc::Status s = client.Upload(session, whole.substr(0, whole.size() / 2), &media);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::Contains("truncated") || Catch::Contains("could be "
                                                                                  "decoded"));
  }
  SECTION("an IVF header claiming 65535x65535 with no frames") {
    std::string ivf = "DKIF";
    auto le16 = [&](uint16_t v) { ivf.push_back(char(v & 0xff)), ivf.push_back(char(v >> 8)); };
    auto le32 = [&](uint32_t v) {
      for (int i = 0; i < 4; ++i) ivf.push_back(char((v >> (8 * i)) & 0xff));
    };
    le16(0);
    le16(32);
    ivf += "VP80";
    le16(65535);
    le16(65535);
    le32(30);
    le32(1);
    le32(1);
    le32(0);
    const grpc::Status s = client.Upload(session, ivf, &media);
    CHECK((s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
           s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED));
  }
  // Whatever was refused left nothing: the session has no media, and a turn works.
  v1::Session state;
  REQUIRE(client.GetSession(session, &state).ok());
  CHECK(state.media_size() == 0);
  CHECK(client.Ask(session, "Anything?").status.ok());

  SECTION("DeleteMedia removes a media item no turn has shown; a shown one stays") {
    REQUIRE(client.Upload(session, MakeTestClip(dir.path()), &media).ok());
    v1::DeleteMediaResponse deleted;
    REQUIRE(DeleteMedia(server, session, media.media_id(), &deleted).ok());
    CHECK(deleted.freed_bytes() == media.size_bytes());
    REQUIRE(client.GetSession(session, &state).ok());
    CHECK(state.media_size() == 0);
    CHECK(DeleteMedia(server, session, media.media_id(), &deleted).error_code() ==
          grpc::StatusCode::NOT_FOUND);
    v1::Media shown;
    REQUIRE(client.Upload(session, MakeTestClip(dir.path()), &shown).ok());
    REQUIRE(client.Ask(session, "And now?").status.ok());
    const grpc::Status kept = DeleteMedia(server, session, shown.media_id(), &deleted);
    CHECK(kept.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(kept.error_message(), Catch::Contains("delete the session"));
  }
}

TEST_CASE("a session deleted mid-turn and re-created under its id inherits nothing",
          "[integration][server]") {
  TempDir dir;
  FakeModelOptions model;
  model.step_delay = 20ms;  // the first turn is still streaming when the session is deleted
  InProcessServer server(TestConfig(), model);
  ChatClient client(server.Stub());
  v1::CreateSessionRequest create;
  create.set_session_id("reused");
  v1::Session session;
  REQUIRE(client.CreateSession(create, &session).ok());
  v1::Media media;
  REQUIRE(client.Upload("reused", MakeTestClip(dir.path()), &media).ok());

  std::thread deleter;
  grpc::Status recreate_while_running;
  v1::ChatRequest first;
  first.set_session_id("reused");
  first.set_text("What is in the old video?");
  const TurnResult old_turn = client.Chat(first, [&](grpc::ClientContext&, int delta) {
    if (delta != 1) return;
    deleter = std::thread([&] {
      ChatClient other(server.Stub());
      v1::DeleteSessionResponse freed;
      REQUIRE(other.DeleteSession("reused", &freed).ok());
      // The id stays taken until the old turn has ended and given back its KV.
      v1::Session again;
      recreate_while_running = other.CreateSession(create, &again);
    });
  });
  deleter.join();
  CHECK_FALSE(old_turn.status.ok());  // cancelled by the delete
  if (recreate_while_running.ok()) {
    // The old turn noticed the cancel at its step boundary and ended between the delete and the
    // re-create (a loaded machine; seen once in CI-like runs): the id was free by then, and
    // nothing of the old turn may be left.
    CHECK(WaitUntil([&] { return server.fake().live_sequences() == 0; }));
  } else {
    CHECK(recreate_while_running.error_code() == grpc::StatusCode::ALREADY_EXISTS);
    REQUIRE(WaitUntil([&] { return client.CreateSession(create, &session).ok(); }));
  }

  // The new session's first turn starts from nothing: no cached tokens, the answer a fresh
  // session gives to the same question.
  const TurnResult fresh_turn = client.Ask("reused", "What is in the old video?");
  REQUIRE(fresh_turn.status.ok());
  REQUIRE(fresh_turn.stats);
  CHECK(fresh_turn.stats->cached_tokens() == 0);
  const std::string control = client.NewSession();
  const TurnResult control_turn = client.Ask(control, "What is in the old video?");
  CHECK(fresh_turn.text == control_turn.text);
  CHECK(server.fake().live_sequences() == 0);
}

TEST_CASE("sessions belong to their principal: tokens and a trusted proxy's tenant header",
          "[integration][server]") {
  TempDir dir;
  std::ofstream(dir / "tokens") << "alice secret-a\nbob secret-b\nproxy secret-p\n";
  server::ServerConfig config = TestConfig();
  config.auth_token_file = (dir / "tokens").string();
  config.tenant_header = "x-framezip-tenant";
  config.tenant_proxy_principals = "proxy";
  InProcessServer server(config);
  ChatClient alice(server.Stub(), "secret-a");
  ChatClient bob(server.Stub(), "secret-b");
  v1::CreateSessionRequest named;
  named.set_session_id("s1");
  v1::Session session;
  REQUIRE(alice.CreateSession(named, &session).ok());

  // Bob sees nothing of it, and each call says only "no session".
  CHECK(bob.GetSession("s1", &session).error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(bob.Ask("s1", "hi").status.error_code() == grpc::StatusCode::NOT_FOUND);
  v1::Media media;
  CHECK(bob.Upload("s1", MakeTestClip(dir.path()), &media).error_code() ==
        grpc::StatusCode::NOT_FOUND);
  v1::DeleteSessionResponse freed;
  CHECK(bob.DeleteSession("s1", &freed).error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(alice.GetSession("s1", &session).ok());  // still there
  // Bob has his own namespace: his "s1" is another session.
  REQUIRE(bob.CreateSession(named, &session).ok());
  REQUIRE(alice.Ask("s1", "Alice asks").status.ok());
  v1::Session alices, bobs;
  REQUIRE(alice.GetSession("s1", &alices).ok());
  REQUIRE(bob.GetSession("s1", &bobs).ok());
  CHECK(alices.turns() == 1);
  CHECK(bobs.turns() == 0);
  // Listing shows a principal its own sessions only.
  auto list = [&](const std::string& token, const std::string& tenant) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token);
    if (!tenant.empty()) context.AddMetadata("x-framezip-tenant", tenant);
    v1::ListSessionsResponse response;
    const grpc::Status status = server.Stub()->ListSessions(&context, {}, &response);
    return std::make_pair(status, response.sessions_size());
  };
  CHECK(list("secret-a", "").second == 1);
  CHECK(list("secret-b", "").second == 1);

  // A trusted proxy speaks for tenants; anyone else setting the header is refused.
  CHECK(list("secret-p", "acme").second == 0);
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer secret-p");
    context.AddMetadata("x-framezip-tenant", "acme");
    REQUIRE(server.Stub()->CreateSession(&context, named, &session).ok());
  }
  CHECK(list("secret-p", "acme").second == 1);
  CHECK(list("secret-p", "globex").second == 0);
  CHECK(list("secret-a", "acme").first.error_code() == grpc::StatusCode::PERMISSION_DENIED);
}

TEST_CASE("admission: integer fields are range-checked and oversized prompts refused unread",
          "[integration][server]") {
  InProcessServer server(TestConfig());
  ChatClient client(server.Stub());
  const std::string session = client.NewSession();
  v1::ChatRequest request;
  request.set_session_id(session);
  request.set_text("hi");
  SECTION("max_tokens 2^31") {
    request.mutable_sampling()->set_max_tokens(1u << 31);
    const TurnResult r = client.Chat(request);
    CHECK(r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(r.status.error_message(), Catch::StartsWith("sampling.max_tokens"));
  }
  SECTION("a stop token id outside the vocabulary") {
    request.mutable_sampling()->add_stop_token_ids(4000000000u);
    CHECK(client.Chat(request).status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("1 MiB prompts, refused before anything tokenizes them") {
    request.set_text(std::string(1 << 20, 'x'));
    const double before = RssMiB();
    for (int i = 0; i < 10; ++i) {
      const TurnResult r = client.Chat(request);
      CHECK(r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
      CHECK_THAT(r.status.error_message(), Catch::Contains("max_prompt_bytes"));
    }
    // The messages themselves pass through gRPC; nothing of them is kept or expanded.
    CHECK(RssMiB() - before < 64);
  }
  SECTION("a 64 KiB model name is quoted short") {
    grpc::ClientContext context;
    v1::GetModelInfoRequest info;
    info.set_model(std::string(64 * 1024, 'm'));
    v1::ModelInfo response;
    const grpc::Status s = server.Stub()->GetModelInfo(&context, info, &response);
    CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
    CHECK(s.error_message().size() < 300);
    CHECK_THAT(s.error_message(), Catch::Contains("65536 bytes"));
  }
  // The session is untouched by every refusal.
  v1::Session state;
  REQUIRE(client.GetSession(session, &state).ok());
  CHECK(state.turns() == 0);
  CHECK_FALSE(state.turn_running());
}

TEST_CASE("per-principal caps and the context bound a turn's reservation",
          "[integration][server]") {
  FakeModelOptions model;
  model.context_tokens = 1024;
  model.bytes_per_token = 1024;
  model.kv_capacity_bytes = 4u << 20;  // 4096 tokens of the fake
  model.step_delay = 20ms;            // turns overlap
  server::ServerConfig config = TestConfig();
  server::SchedulerOptions scheduler;
  scheduler.max_queued_tokens_per_principal = 3000;
  InProcessServer server(config, model, scheduler);
  ChatClient client(server.Stub());
  // A huge max_tokens is capped by the context (1024 tokens of KV, not 2^20): it is admitted
  // and another session's turn runs beside it.
  const std::string greedy = client.NewSession();
  const std::string other = client.NewSession();
  v1::ChatRequest big;
  big.set_session_id(greedy);
  big.set_text("tell me everything");
  big.mutable_sampling()->set_max_tokens(1u << 20);
  big.mutable_sampling()->set_ignore_eos(true);
  TurnResult big_result;
  std::thread runner([&] { big_result = client.Chat(big); });
  const TurnResult small = client.Ask(other, "short one");
  runner.join();
  CHECK(big_result.status.ok());
  CHECK(small.status.ok());
  // Three such turns at once would queue 3 x 1024 tokens: over this caller's cap of 3000.
  std::vector<TurnResult> results(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      v1::ChatRequest r = big;
      r.set_session_id(client.NewSession());
      results[i] = client.Chat(r);
    });
  }
  for (auto& t : threads) t.join();
  int refused = 0;
  for (const TurnResult& r : results) {
    if (r.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      CHECK_THAT(r.status.error_message(), Catch::Contains("max_queued_tokens_per_principal"));
      CHECK(r.deltas == 0);  // refused up front, never mid-stream
    } else {
      CHECK(r.status.ok());
    }
  }
  CHECK(refused >= 1);
}

TEST_CASE("upload limits: the server-wide buffer and the idle timeout", "[integration][server]") {
  TempDir dir;
  server::ServerConfig config = TestConfig();
  config.max_upload_buffer_bytes = 1 << 20;
  config.upload_idle_timeout_seconds = 1;
  InProcessServer server(config);
  ChatClient client(server.Stub());
  const std::string session = client.NewSession();
  // An upload that declares 900 KiB and stalls holds the buffer until its idle timeout.
  grpc::ClientContext stalled_context;
  stalled_context.set_deadline(std::chrono::system_clock::now() + 30s);
  v1::Media stalled_media;
  auto stalled = server.Stub()->UploadMedia(&stalled_context, &stalled_media);
  v1::UploadMediaRequest first;
  first.mutable_metadata()->set_session_id(session);
  first.mutable_metadata()->set_declared_size_bytes(900 * 1024);
  REQUIRE(stalled->Write(first));
  v1::UploadMediaRequest chunk;
  chunk.set_chunk(std::string(1024, 'x'));
  REQUIRE(stalled->Write(chunk));
  // Meanwhile a second large upload does not fit the buffer.
  v1::Media media;
  std::this_thread::sleep_for(200ms);
  const grpc::Status refused =
      client.Upload(session, std::string(300 * 1024, 'y'), &media);
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(refused.error_message(), Catch::Contains("max_upload_buffer_bytes"));
  // The stalled upload is ended by the server, and its bytes given back.
  const grpc::Status ended = stalled->Finish();
  CHECK(ended.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK_THAT(ended.error_message(), Catch::Contains("upload_idle_timeout_seconds"));
  CHECK(client.Upload(session, MakeTestClip(dir.path()), &media).ok());
}

// `frames` frames of width x height with rows padded by `padding` bytes: a colour per frame.
v1::RawFrames RawLayout(uint32_t width, uint32_t height, uint32_t padding, uint32_t frames) {
  v1::RawFrames raw;
  raw.set_width(width);
  raw.set_height(height);
  raw.set_stride_bytes(3 * width + padding);
  raw.set_frame_count(frames);
  for (uint32_t i = 0; i < frames; ++i) raw.add_timestamps_us(int64_t{i} * 40'000);
  return raw;
}
std::string RawPixels(const v1::RawFrames& raw) {
  std::string pixels;
  for (uint32_t i = 0; i < raw.frame_count(); ++i) {
    for (uint32_t y = 0; y < raw.height(); ++y) {
      for (uint32_t b = 0; b < raw.stride_bytes(); ++b)
        pixels.push_back(static_cast<char>(i * 40 + b));
    }
  }
  return pixels;
}

TEST_CASE("raw-frame uploads: accepted, wrong fields refused naming them, the buffer cap holds",
          "[integration][server]") {
  server::ServerConfig config = TestConfig();
  config.max_upload_buffer_bytes = 1 << 20;
  config.upload_idle_timeout_seconds = 1;
  InProcessServer server(config);
  ChatClient client(server.Stub());
  const std::string session = client.NewSession();

  const v1::RawFrames raw = RawLayout(32, 24, 4, 6);
  v1::Media media;
  const grpc::Status ok = client.UploadRaw(session, raw, RawPixels(raw), &media);
  REQUIRE(ok.error_message() == "");
  CHECK(media.kind() == v1::MEDIA_KIND_VIDEO);
  CHECK(media.mime_type() == "video/x-raw-rgb24");
  CHECK(media.container() == "rgb24-frames");
  CHECK(media.width() == 32);
  CHECK(media.height() == 24);
  CHECK(media.duration_seconds() == Approx(0.24));
  CHECK(media.frame_timestamps_size() > 0);
  CHECK(client.Ask(session, "What is shown?").status.ok());

  struct Refusal {
    const char* what;
    v1::RawFrames raw;
    std::optional<uint64_t> declared;
    const char* field;
  };
  v1::RawFrames narrow = raw;
  narrow.set_stride_bytes(95);
  v1::RawFrames backwards = raw;
  backwards.set_timestamps_us(3, 40'000);
  v1::RawFrames negative = raw;
  negative.set_timestamps_us(0, -1);
  v1::RawFrames counted = raw;
  counted.set_frame_count(7);
  v1::RawFrames empty = raw;
  empty.set_width(0);
  const Refusal refusals[] = {
      {"stride below a row", narrow, std::nullopt, "metadata.raw_frames.stride_bytes"},
      {"timestamps that go back", backwards, std::nullopt, "metadata.raw_frames.timestamps_us[3]"},
      {"a negative timestamp", negative, std::nullopt, "metadata.raw_frames.timestamps_us[0]"},
      {"more frames than timestamps", counted, std::nullopt, "metadata.raw_frames.timestamps_us"},
      {"zero width", empty, std::nullopt, "metadata.raw_frames.width"},
      {"a size off by one", raw, RawPixels(raw).size() - 1, "metadata.declared_size_bytes"},
  };
  for (const Refusal& r : refusals) {
    INFO(r.what);
    const grpc::Status s = client.UploadRaw(session, r.raw, RawPixels(raw), &media, r.declared);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(s.error_message(), Catch::StartsWith(r.field));
  }
  // Fewer pixel bytes sent than the layout needs.
  const std::string pixels = RawPixels(raw);
  const grpc::Status short_upload =
      client.UploadRaw(session, raw, pixels.substr(0, pixels.size() - 3), &media, pixels.size());
  CHECK(short_upload.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(short_upload.error_message(), Catch::Contains("declared_size_bytes"));

  // Generate's inline frames: the data's length is checked against the layout.
  v1::GenerateRequest generate;
  v1::InlineMedia* inline_media = generate.add_media();
  inline_media->set_media_id("frames");
  *inline_media->mutable_raw_frames() = raw;
  inline_media->set_data(pixels + "x");
  v1::Message* user = generate.add_messages();
  user->set_role(v1::ROLE_USER);
  user->add_content()->set_media_id("frames");
  user->add_content()->set_text("What is shown?");
  const TurnResult bad_inline = client.Generate(generate);
  CHECK(bad_inline.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(bad_inline.status.error_message(), Catch::StartsWith("media[0].data"));
  inline_media->set_data(pixels);
  CHECK(client.Generate(generate).status.error_message() == "");

  // Hostile: 8192 x 8192 x 65536 frames (13 PB) is refused from the metadata, before a chunk.
  const double before = RssMiB();
  v1::RawFrames huge = RawLayout(8192, 8192, 0, 65536);
  const grpc::Status over = client.UploadRaw(session, huge, std::string(4096, 'z'), &media,
                                             uint64_t{8192} * 3 * 8192 * 65536);
  CHECK(over.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(over.error_message(), Catch::Contains("metadata.declared_size_bytes"));
  CHECK(RssMiB() - before < 64);

  // Raw uploads share the server-wide upload buffer with containers: one that declares 900 KiB
  // and stalls holds it until its idle timeout, and a second does not fit meanwhile.
  const v1::RawFrames big = RawLayout(320, 240, 0, 4);  // 921600 bytes
  grpc::ClientContext stalled_context;
  stalled_context.set_deadline(std::chrono::system_clock::now() + 30s);
  v1::Media stalled_media;
  auto stalled = server.Stub()->UploadMedia(&stalled_context, &stalled_media);
  v1::UploadMediaRequest first;
  first.mutable_metadata()->set_session_id(session);
  *first.mutable_metadata()->mutable_raw_frames() = big;
  first.mutable_metadata()->set_declared_size_bytes(921600);
  REQUIRE(stalled->Write(first));
  v1::UploadMediaRequest chunk;
  chunk.set_chunk(std::string(1024, 'x'));
  REQUIRE(stalled->Write(chunk));
  std::this_thread::sleep_for(200ms);
  const v1::RawFrames second = RawLayout(160, 120, 0, 4);  // 230400 bytes
  const grpc::Status refused = client.UploadRaw(session, second, RawPixels(second), &media);
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(refused.error_message(), Catch::Contains("max_upload_buffer_bytes"));
  CHECK(stalled->Finish().error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  // The client sees the deadline before the server has ended the stalled upload and given its
  // bytes back: once it has, the second upload fits.
  std::string last_error;
  CHECK(WaitUntil([&] {
    last_error = client.UploadRaw(session, second, RawPixels(second), &media).error_message();
    return last_error.empty();
  }));
  CHECK(last_error == "");
}

TEST_CASE("an upload racing DeleteSession ends NOT_FOUND, never INTERNAL",
          "[integration][server]") {
  TempDir dir;
  InProcessServer server(TestConfig());
  ChatClient client(server.Stub());
  const std::string clip = MakeTestClip(dir.path());
  for (int round = 0; round < 10; ++round) {
    const std::string session = client.NewSession();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 30s);
    v1::Media media;
    auto writer = server.Stub()->UploadMedia(&context, &media);
    v1::UploadMediaRequest first;
    first.mutable_metadata()->set_session_id(session);
    first.mutable_metadata()->set_declared_size_bytes(clip.size());
    REQUIRE(writer->Write(first));
    v1::UploadMediaRequest chunk;
    chunk.set_chunk(clip);
    REQUIRE(writer->Write(chunk));
    std::thread deleter([&] {
      if (round % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(round));
      v1::DeleteSessionResponse freed;
      ChatClient(server.Stub()).DeleteSession(session, &freed);
    });
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    deleter.join();
    INFO("round " << round << ": " << s.error_message());
    CHECK((s.ok() || s.error_code() == grpc::StatusCode::NOT_FOUND));
  }
  // Nothing of the deleted sessions stays on disk.
  CHECK(WaitUntil([&] {
    size_t now = 0;
    for (const auto& e :
         std::filesystem::recursive_directory_iterator(server.server().media_dir())) {
      now += e.is_regular_file() ? 1 : 0;
    }
    return now == 0;
  }));
}

TEST_CASE("a slow metrics client does not hold up other scrapes", "[integration][server]") {
  InProcessServer server(TestConfig());
  const int port = server.server().metrics_port();
  // Clients that send their request a byte at a time, or never finish it.
  std::vector<int> slow;
  for (int i = 0; i < 4; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(write(fd, "G", 1) == 1);
    slow.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string body = HttpGet(port, "/metrics");
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK_THAT(body, Catch::Contains("framezip_num_requests_running"));
  CHECK(took < 1s);
  for (int fd : slow) close(fd);
}

}  // namespace
}  // namespace framezip::testing
