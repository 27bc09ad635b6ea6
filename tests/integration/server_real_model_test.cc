// framezip-server's code (VideoChatServer + BatchScheduler + EngineBackend) on the REAL shipped
// model (models/framezip-tiny-video) on 127.0.0.1:0, with the session KV store:
//   - turn 2 reuses turn 1's KV (cached tokens, only the new text prefilled) and answers like a
//     fresh stateless request with the same history (greedy);
//   - session KV is committed to the embedded store after each turn, pinned, freed on delete,
//     and written to the disk tier on drain;
//   - under KV memory pressure idle sessions are evicted from the engine and their next turn
//     restores the cached prefix from the store, with the same answer.
//   - continuous batching: a long prompt is prefilled in scheduler-sized chunks, each fused into
//     one engine step with the decode token of another turn, and dropping a turn part-way
//     through its prompt frees its pages.
// Short clips and 4 frames keep each turn well under a second on a CPU.
#include <absl/strings/escaping.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "kvstore/tiered_store.h"
#include "media/media.h"
#include "media/raw_frames.h"
#include "server/engine_backend.h"
#include "server/engine_factory.h"
#include "server/media_backend_factory.h"
#include "tests/integration/http_test_client.h"
#include "tests/integration/server_test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace framezip::testing {
namespace {

server::ServerConfig RealModelConfig() {
  server::ServerConfig config = TestConfig();
  config.model_dir = (SourceDir() / "models/framezip-tiny-video").string();
  return config;
}

std::unique_ptr<server::VideoChatServer> StartRealServer(const server::ServerConfig& config) {
  auto media = server::CreateMediaBackend(config);
  INFO((media.ok() ? "" : std::string(media.status().message())));
  REQUIRE(media.ok());
  auto engine = server::CreateEngine(config, *media);
  INFO((engine.ok() ? "" : std::string(engine.status().message())));
  REQUIRE(engine.ok());
  auto server = server::VideoChatServer::Start(config, std::move(*engine), *media);
  INFO((server.ok() ? "" : std::string(server.status().message())));
  REQUIRE(server.ok());
  return std::move(*server);
}

std::unique_ptr<v1::VideoChat::Stub> StubFor(const server::VideoChatServer& server) {
  return v1::VideoChat::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()),
                                                    grpc::InsecureChannelCredentials()));
}

// A greedy session with 4 frames per video and short answers.
std::string NewVideoSession(ChatClient& client, const std::string& clip,
                            v1::Media* uploaded = nullptr) {
  v1::CreateSessionRequest request;
  request.set_system_prompt("You are terse.");
  request.mutable_frames()->set_num_frames(4);
  request.mutable_sampling()->set_temperature(0);
  request.mutable_sampling()->set_max_tokens(12);
  v1::Session session;
  const grpc::Status created = client.CreateSession(request, &session);
  REQUIRE(created.error_message() == "");
  v1::Media media;
  const grpc::Status status = client.Upload(session.session_id(), clip, &media);
  REQUIRE(status.error_message() == "");
  if (uploaded != nullptr) *uploaded = media;
  return session.session_id();
}

void AddText(v1::Message* m, v1::Role role, const std::string& text) {
  m->set_role(role);
  m->add_content()->set_text(text);
}

// The stateless request with the same history as a two-turn session.
v1::GenerateRequest FreshHistory(const std::string& clip, const std::string& answer1) {
  v1::GenerateRequest fresh;
  fresh.mutable_frames()->set_num_frames(4);
  fresh.mutable_sampling()->set_temperature(0);
  fresh.mutable_sampling()->set_max_tokens(12);
  auto* inline_media = fresh.add_media();
  inline_media->set_media_id("video");
  inline_media->set_mime_type("video/mp4");
  inline_media->set_data(clip);
  AddText(fresh.add_messages(), v1::ROLE_SYSTEM, "You are terse.");
  auto* user1 = fresh.add_messages();
  user1->set_role(v1::ROLE_USER);
  user1->add_content()->set_media_id("video");
  user1->add_content()->set_text("What moves?");
  AddText(fresh.add_messages(), v1::ROLE_ASSISTANT, answer1);
  AddText(fresh.add_messages(), v1::ROLE_USER, "And then?");
  return fresh;
}

uint64_t BytesIn(const v1::TurnStats& stats, v1::KvTier tier) {
  uint64_t n = 0;
  for (const v1::KvBytes& b : stats.kv_bytes()) {
    if (b.tier() == tier) n += b.bytes();
  }
  return n;
}

// The session's KV bytes in the store's host tier once its last turn's commit (off the step
// thread) has landed; 0 when it does not land within 10 s.
uint64_t HostBytesWhenDurable(ChatClient& client, const std::string& session) {
  v1::Session s;
  const bool durable = WaitUntil([&] {
    return client.GetSession(session, &s).ok() && s.kv_durability() == v1::KV_DURABILITY_DURABLE;
  });
  if (!durable) return 0;
  uint64_t n = 0;
  for (const v1::KvBytes& b : s.kv_bytes()) {
    if (b.tier() == v1::KV_TIER_HOST) n += b.bytes();
  }
  return n;
}

TEST_CASE("real model: turn 2 reuses turn 1's KV, answers as a fresh request, KV kept in the store",
          "[integration][server][e2e]") {
  TempDir dir;
  server::ServerConfig config = RealModelConfig();
  config.kvstore_disk_path = (dir.path() / "kv").string();
  const std::string clip = MakeTestClip(dir.path(), 1.0);
  std::string answer2;
  {
    auto server = StartRealServer(config);
    ChatClient client(StubFor(*server));
    const std::string session = NewVideoSession(client, clip);

    const TurnResult t1 = client.Ask(session, "What moves?");
    REQUIRE(t1.status.error_message() == "");
    REQUIRE(t1.stats);
    CHECK(t1.stats->cached_tokens() == 0);
    CHECK(t1.stats->generated_tokens() > 0);
    CHECK(t1.stats->visual_tokens_before_pruning() > 0);
    // Turn 1's KV is in engine memory, and committed to the store's host tier once its commit
    // ran (off the step thread).
    CHECK(BytesIn(*t1.stats, v1::KV_TIER_DEVICE) > 0);
    const uint64_t host1 = HostBytesWhenDurable(client, session);
    CHECK(host1 > 0);

    const TurnResult t2 = client.Ask(session, "And then?");
    REQUIRE(t2.status.error_message() == "");
    REQUIRE(t2.stats);
    CHECK(t2.stats->cached_tokens() > 0);
    CHECK(t2.stats->cached_tokens() >= t1.stats->prompt_tokens());
    // Only turn 2's text (and the close of turn 1's reply) is prefilled, not the video.
    CHECK(t2.stats->prefilled_tokens() < 20);
    CHECK(t2.stats->prefilled_tokens() < t1.stats->prefilled_tokens());
    CHECK(t2.stats->kv_restore_seconds() == 0);  // still in engine memory
    CHECK(HostBytesWhenDurable(client, session) > host1);
    answer2 = t2.text;

    // A fresh stateless request with the same history gives the same (greedy) answer.
    const TurnResult fresh = client.Generate(FreshHistory(clip, t1.text));
    REQUIRE(fresh.status.error_message() == "");
    REQUIRE(fresh.stats);
    CHECK(fresh.stats->cached_tokens() == 0);
    CHECK(fresh.text == t2.text);

    // A second session keeps its own KV; deleting it frees engine memory and store blocks.
    const std::string other = NewVideoSession(client, clip);
    REQUIRE(client.Ask(other, "What moves?").status.ok());
    CHECK(HostBytesWhenDurable(client, other) > 0);
    v1::DeleteSessionResponse deleted;
    REQUIRE(client.DeleteSession(other, &deleted).ok());
    std::map<int, uint64_t> freed;
    for (const v1::KvBytes& b : deleted.freed()) freed[b.tier()] += b.bytes();
    CHECK(freed[v1::KV_TIER_DEVICE] > 0);
    CHECK(freed[v1::KV_TIER_HOST] > 0);

    // Drain (SIGTERM's path) flushes the remaining session's KV: write-back blocks go to disk.
    server->Drain(std::chrono::milliseconds(2000));
  }
  // Reopening the disk tier finds the flushed blocks.
  kvstore::TieredStoreOptions options;
  options.host.reset();
  options.disk = kvstore::DiskTierOptions{};
  options.disk->dir = dir.path() / "kv";
  auto store = kvstore::TieredStore::Open(options);
  REQUIRE(store.ok());
  auto stats = (*store)->Stats();
  REQUIRE(stats.ok());
  REQUIRE(stats->tiers.size() == 1);
  CHECK(stats->tiers[0].tier == kvstore::Tier::kDisk);
  CHECK(stats->tiers[0].blocks >= 2);  // two turns' segments
  CHECK(stats->tiers[0].bytes > 0);
}

TEST_CASE("real model: sessions evicted under KV pressure restore their prefix from the store",
          "[integration][server][e2e]") {
  TempDir dir;
  server::ServerConfig config = RealModelConfig();
  // Room for about two sessions' KV: the third turn evicts an idle session to the store.
  config.kv_budget_bytes = 200 << 10;
  config.max_running = 1;
  const std::string clip = MakeTestClip(dir.path(), 1.0);
  auto server = StartRealServer(config);
  ChatClient client(StubFor(*server));

  constexpr int kSessions = 4;
  std::vector<std::string> sessions;
  std::vector<std::string> answers1;
  for (int i = 0; i < kSessions; ++i) {
    sessions.push_back(NewVideoSession(client, clip));
    const TurnResult t1 = client.Ask(sessions.back(), "What moves?");
    REQUIRE(t1.status.error_message() == "");
    answers1.push_back(t1.text);
  }
  int restored = 0;
  std::vector<std::string> answers2;
  for (int i = 0; i < kSessions; ++i) {
    const TurnResult t2 = client.Ask(sessions[i], "And then?");
    REQUIRE(t2.status.error_message() == "");
    REQUIRE(t2.stats);
    CAPTURE(i, t2.stats->cached_tokens(), t2.stats->prefilled_tokens(),
            t2.stats->kv_restore_seconds());
    // Restored or not, the prefix is cached and only the new text is prefilled.
    CHECK(t2.stats->cached_tokens() > 0);
    CHECK(t2.stats->prefilled_tokens() < 20);
    if (t2.stats->kv_restore_seconds() > 0) ++restored;
    answers2.push_back(t2.text);
  }
  CHECK(restored > 0);
  // Restores are timed per store tier.
  const std::string metrics = HttpGet(server->metrics_port(), "/metrics");
  bool host_restores = false;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("framezip_kv_restore_seconds_count{", 0) == 0 &&
        line.find("tier=\"host\"") != std::string::npos) {
      host_restores = true;
    }
  }
  CHECK(host_restores);
  // The same conversation in every session: the same greedy answers, restored or not, and the
  // same as a fresh request with that history.
  const TurnResult fresh = client.Generate(FreshHistory(clip, answers1[0]));
  REQUIRE(fresh.status.error_message() == "");
  for (int i = 0; i < kSessions; ++i) {
    CHECK(answers1[i] == answers1[0]);
    CHECK(answers2[i] == fresh.text);
  }
}

server::TurnRequest TextTurn(const std::string& id, const std::string& text, uint32_t max_tokens) {
  server::TurnRequest r;
  r.turn_id = id;
  server::ChatMessage m;
  m.role = server::Role::kUser;
  server::ContentPart part;
  part.text = text;
  m.content.push_back(part);
  r.messages.push_back(m);
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

// KV reservations for a backend driven without a scheduler: every restore fits.
class UnlimitedKv final : public server::KvReservations {
 public:
  bool TryReserve(uint64_t) override { return true; }
  void Release(uint64_t) override {}
};

server::StepItem Item(const server::PreparedTurn& turn, uint32_t prefill_tokens) {
  server::StepItem item;
  item.sequence = turn.sequence.get();
  item.prefill_tokens = prefill_tokens;
  return item;
}

TEST_CASE("real model: a long prompt is prefilled in chunks, each step also decoding another turn",
          "[integration][server]") {
  server::ServerConfig config = RealModelConfig();
  config.kvstore = "none";
  auto media = server::CreateMediaBackend(config);
  REQUIRE(media.ok());
  auto backend = server::EngineBackend::Load(config, *media);
  INFO((backend.ok() ? "" : std::string(backend.status().message())));
  REQUIRE(backend.ok());
  UnlimitedKv kv;
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "item " + std::to_string(i) + ", ";
  auto a = (*backend)->Prepare(TextTurn("a", "Hello", 200), kv);
  auto b = (*backend)->Prepare(TextTurn("b", long_text, 4), kv);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  // Prepare tokenized the prompts: the scheduler knows exactly what to prefill.
  const uint32_t chunk = 16;
  const uint32_t b_prompt = b->prompt_tokens - b->cached_tokens;
  REQUIRE(b_prompt > 3 * chunk);

  std::vector<server::StepItem> start = {Item(*a, a->prompt_tokens)};
  REQUIRE((*backend)->Step(start).ok());
  REQUIRE(start[0].status.ok());
  REQUIRE(start[0].emitted);  // the whole short prompt, then its first token
  uint32_t left = b_prompt;
  int steps = 0;
  for (;;) {
    const uint32_t n = std::min(chunk, left);
    std::vector<server::StepItem> batch = {Item(*a, 0), Item(*b, n)};
    REQUIRE((*backend)->Step(batch).ok());
    ++steps;
    CAPTURE(steps);
    REQUIRE(batch[0].status.ok());
    REQUIRE(batch[1].status.ok());
    CHECK(batch[0].emitted);  // the decoding turn gets a token in every step
    left -= n;
    if (left == 0) {
      CHECK(batch[1].emitted);  // the first token comes with the last chunk
      break;
    }
    CHECK(!batch[1].emitted);
  }
  CHECK(steps == static_cast<int>((b_prompt + chunk - 1) / chunk));
  server::TurnStats stats;
  b->sequence->ReportStats(stats);
  CHECK(stats.prefilled_tokens == b_prompt);
  CHECK(stats.generated_tokens == 1);

  // A turn dropped part-way through its prompt (cancelled) gives its pages back.
  const uint64_t before = (*backend)->KvUsedBytes();
  auto c = (*backend)->Prepare(TextTurn("c", long_text, 4), kv);
  REQUIRE(c.ok());
  for (int i = 0; i < 3; ++i) {
    std::vector<server::StepItem> batch = {Item(*a, 0), Item(*c, chunk)};
    REQUIRE((*backend)->Step(batch).ok());
    REQUIRE(!batch[1].emitted);
  }
  const uint64_t with_c = (*backend)->KvUsedBytes();
  c->sequence.reset();
  const uint64_t after = (*backend)->KvUsedBytes();
  CHECK(with_c > before);
  // Only A's growth by three tokens may remain (at most a page per layer and K/V).
  CHECK(after < with_c);
  CHECK(after <= before + (with_c - before) / 2);
}

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string HealthOf(const server::VideoChatServer& server, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return "error: " + status.error_message();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

// tools/golden/gen_image_turn_golden.py: one PNG, the shipped model's question about it, and what
// transformers' processor and model made of them.
nlohmann::json ImageTurnGolden() {
  std::ifstream in(SourceDir() / "tests/data/golden/framezip-tiny-video-image/turn.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

TEST_CASE("real model: a single image is cut into anyres tiles and answered as transformers does",
          "[integration][server][golden]") {
  const nlohmann::json golden = ImageTurnGolden();
  server::ServerConfig config = RealModelConfig();
  config.openai_listen = "127.0.0.1:0";
  // A cap on sampled frames below the image's tiles (5): tiles are not sampled frames.
  config.max_frames = 4;
  REQUIRE(golden["tiles"].get<int>() > config.max_frames);
  auto server = StartRealServer(config);
  ChatClient client(StubFor(*server));
  v1::CreateSessionRequest request;  // no system prompt: the golden's prompt has none
  request.mutable_sampling()->set_temperature(0);
  request.mutable_sampling()->set_max_tokens(8);
  v1::Session session;
  REQUIRE(client.CreateSession(request, &session).error_message() == "");
  v1::Media media;
  const grpc::Status uploaded =
      client.Upload(session.session_id(),
                    ReadAll(SourceDir() / "tests/data/golden/framezip-tiny-video-image/input.png"),
                    &media, std::nullopt, 64 * 1024, "image/png");
  REQUIRE(uploaded.error_message() == "");
  CHECK(media.kind() == v1::MEDIA_KIND_IMAGE);
  // The upload plans the tiles' placeholders (base tile, unpadded grid, a newline per row), not
  // one base-resolution tile's.
  CHECK(media.visual_tokens() == golden["image_tokens"].get<uint32_t>());

  const TurnResult r = client.Ask(session.session_id(), golden["question"].get<std::string>());
  INFO(r.status.error_message());
  REQUIRE(r.status.ok());
  REQUIRE(r.stats);
  CHECK(r.stats->prompt_tokens() == golden["input_ids"].size());
  CHECK(r.stats->visual_tokens_before_pruning() == golden["image_tokens"].get<uint32_t>());
  // The reply's first token has a margin of several logits in the golden (greedy_margins); the
  // answer is the item's.
  CHECK(golden["greedy_margins"][0].get<double>() > 1.0);
  CHECK(r.text == golden["reply_text"].get<std::string>());

  // The same image as a data: URL through the OpenAI-compatible API.
  const std::string png =
      ReadAll(SourceDir() / "tests/data/golden/framezip-tiny-video-image/input.png");
  const nlohmann::json body = {
      {"max_tokens", 8},
      {"temperature", 0},
      {"messages",
       {{{"role", "user"},
         {"content",
          {{{"type", "image_url"},
            {"image_url", {{"url", "data:image/png;base64," + absl::Base64Escape(png)}}}},
           {{"type", "text"}, {"text", golden["question"]}}}}}}}};
  HttpCall call;
  call.body = body.dump();
  const HttpReply http = Http(server->openai_port(), call);
  INFO(http.body);
  REQUIRE(http.status == 200);
  const nlohmann::json answer = nlohmann::json::parse(http.body);
  CHECK(answer["usage"]["prompt_tokens"] == golden["input_ids"].size());
  CHECK(answer["choices"][0]["message"]["content"] == golden["reply_text"]);

  // A 1-pixel-wide, 4000-pixel-tall strip leaves no feature row after unpadding: its turn is
  // refused with INVALID_ARGUMENT naming the image, and the server goes on.
  v1::Session strip;
  REQUIRE(client.CreateSession(request, &strip).error_message() == "");
  REQUIRE(client.Upload(strip.session_id(),
                        ReadAll(SourceDir() / "tests/data/images/strip_1x4000.png"), &media,
                        std::nullopt, 64 * 1024, "image/png")
              .error_message() == "");
  const TurnResult refused = client.Ask(strip.session_id(), "What color is it?");
  CHECK(refused.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(refused.status.error_message(), Catch::Contains("image '"));
  CHECK_THAT(refused.status.error_message(), Catch::Contains("4000x1 (height x width)"));

  // Two images in one turn: each padded to a square and sent as one tile, as the processor does
  // for a multi-image sample (GetModelInfo's tokens_per_image each).
  v1::Session two;
  REQUIRE(client.CreateSession(request, &two).error_message() == "");
  for (int i = 0; i < 2; ++i) {
    REQUIRE(client.Upload(two.session_id(), png, &media, std::nullopt, 64 * 1024, "image/png")
                .error_message() == "");
  }
  v1::ModelInfo info;
  grpc::ClientContext info_context;
  REQUIRE(StubFor(*server)->GetModelInfo(&info_context, v1::GetModelInfoRequest(), &info).ok());
  const TurnResult both = client.Ask(two.session_id(), "What color is the cross?");
  INFO(both.status.error_message());
  REQUIRE(both.status.ok());
  REQUIRE(both.stats);
  CHECK(both.stats->visual_tokens_before_pruning() == 2 * info.vision().tokens_per_image());
  CHECK(both.stats->prompt_tokens() ==
        golden["input_ids"].size() - golden["image_tokens"].get<uint32_t>() +
            2 * info.vision().tokens_per_image() + 1);
}

TEST_CASE("real model: a 426x240 clip and a 2x2 clip decode in the workers and get answers",
          "[integration][server]") {
  TempDir dir;
  auto server = StartRealServer(RealModelConfig());
  ChatClient client(StubFor(*server));
  for (const std::string size : {"426x240", "40x40", "2x2"}) {
    const auto path = dir.path() / ("clip_" + size + ".mp4");
    REQUIRE(RunCommand({"ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        "testsrc2=size=" + size + ":rate=8", "-t", "2", "-pix_fmt", "yuv420p",
                        "-c:v", "libx264", path.string()},
                       dir.path() / "ffmpeg.log") == 0);
    v1::Media media;
    const std::string session = NewVideoSession(client, ReadAll(path), &media);
    const TurnResult r = client.Ask(session, "What color is the circle?");
    INFO(size << ": " << r.status.error_message());
    CHECK(r.status.ok());
    REQUIRE(r.stats);
    CHECK(r.stats->visual_tokens_before_pruning() > 0);
    // The upload's planned visual tokens are the engine's own count (frames x pooled grid + the
    // video's newline), not a server-side guess.
    CHECK(media.visual_tokens() == r.stats->visual_tokens_before_pruning());
  }
}

// Every frame of `clip` decoded to RGB24 by the media stage (identity preprocessing: the float
// values are the bytes), as a client that decodes on its own would send them: rows padded to
// `stride_bytes`, timestamps in microseconds.
struct RgbFrames {
  v1::RawFrames raw;
  std::string pixels;
};
RgbFrames DecodeToRgb(const std::filesystem::path& clip, uint32_t row_padding) {
  const media::MediaSource source =
      media::MediaSource::FromFile(clip.parent_path(), clip.filename().string());
  auto probed = media::ProbeMedia(source, {});
  REQUIRE(probed.ok());
  media::PreprocessSpec identity;
  identity.resize = media::ResizeMode::kNone;
  identity.rescale_factor = 1.0;
  identity.mean = {0, 0, 0};
  identity.std = {1, 1, 1};
  const int n = static_cast<int>(probed->frame_count);
  auto all = media::DecodeMedia(source, {.num_frames = n}, identity, {});
  REQUIRE(all.ok());
  const media::FrameBatch& fb = all->frames;
  REQUIRE(fb.num_frames == n);
  RgbFrames out;
  out.raw.set_width(static_cast<uint32_t>(fb.width));
  out.raw.set_height(static_cast<uint32_t>(fb.height));
  out.raw.set_stride_bytes(static_cast<uint32_t>(3 * fb.width) + row_padding);
  out.raw.set_frame_count(static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) {
    out.raw.add_timestamps_us(std::llround(all->timestamps_s[i] * 1e6));
    const size_t plane = static_cast<size_t>(fb.height) * fb.width;
    for (int y = 0; y < fb.height; ++y) {
      for (int x = 0; x < fb.width; ++x) {
        for (int c = 0; c < 3; ++c) {
          const float v = fb.Frame(i)[c * plane + static_cast<size_t>(y) * fb.width + x];
          out.pixels.push_back(static_cast<char>(static_cast<uint8_t>(v)));
        }
      }
      out.pixels.append(row_padding, '\x33');
    }
  }
  return out;
}

std::string NewSessionLike(ChatClient& client) {
  v1::CreateSessionRequest request;
  request.set_system_prompt("You are terse.");
  request.mutable_frames()->set_num_frames(4);
  request.mutable_sampling()->set_temperature(0);
  request.mutable_sampling()->set_max_tokens(12);
  v1::Session session;
  REQUIRE(client.CreateSession(request, &session).error_message() == "");
  return session.session_id();
}

TEST_CASE("real model: raw RGB24 frames answer as the video they were decoded from",
          "[integration][server][e2e]") {
  TempDir dir;
  const server::ServerConfig config = RealModelConfig();
  const std::string clip = MakeTestClip(dir.path(), 1.0);
  const auto clip_path = dir.path() / "same.mp4";
  { std::ofstream(clip_path, std::ios::binary) << clip; }
  const RgbFrames rgb = DecodeToRgb(clip_path, /*row_padding=*/5);
  auto server = StartRealServer(config);
  ChatClient client(StubFor(*server));

  v1::Media video_media;
  const std::string video_session = NewVideoSession(client, clip, &video_media);
  const TurnResult video_turn = client.Ask(video_session, "What moves?");
  REQUIRE(video_turn.status.error_message() == "");
  REQUIRE(video_turn.stats);
  REQUIRE(video_turn.stats->generated_tokens() > 0);
  REQUIRE(!video_turn.text.empty());

  const std::string raw_session = NewSessionLike(client);
  v1::Media raw_media;
  const grpc::Status uploaded =
      client.UploadRaw(raw_session, rgb.raw, rgb.pixels, &raw_media, std::nullopt, 1000);
  REQUIRE(uploaded.error_message() == "");
  CHECK(raw_media.kind() == v1::MEDIA_KIND_VIDEO);
  CHECK(raw_media.mime_type() == "video/x-raw-rgb24");
  CHECK(raw_media.codec() == "rawvideo");
  CHECK(raw_media.width() == video_media.width());
  CHECK(raw_media.height() == video_media.height());
  CHECK(raw_media.duration_seconds() == Approx(video_media.duration_seconds()).margin(1e-6));
  CHECK(raw_media.visual_tokens() == video_media.visual_tokens());
  REQUIRE(raw_media.frame_timestamps_size() == video_media.frame_timestamps_size());
  for (int i = 0; i < raw_media.frame_timestamps_size(); ++i) {
    CHECK(raw_media.frame_timestamps(i) == Approx(video_media.frame_timestamps(i)).margin(1e-9));
  }

  // The same pixels give the same (greedy) answer from the same prompt.
  const TurnResult raw_turn = client.Ask(raw_session, "What moves?");
  REQUIRE(raw_turn.status.error_message() == "");
  REQUIRE(raw_turn.stats);
  CHECK(raw_turn.stats->prompt_tokens() == video_turn.stats->prompt_tokens());
  CHECK(raw_turn.text == video_turn.text);
  // Turn 2 reuses turn 1's KV as for a video.
  const TurnResult raw_turn2 = client.Ask(raw_session, "And then?");
  REQUIRE(raw_turn2.status.error_message() == "");
  CHECK(raw_turn2.stats->cached_tokens() >= raw_turn.stats->prompt_tokens());
  CHECK(raw_turn2.stats->prefilled_tokens() < 20);
  // The same frames sent again are the same media (content hash: the KV store's identity).
  v1::Media again;
  REQUIRE(client.UploadRaw(NewSessionLike(client), rgb.raw, rgb.pixels, &again).ok());
  CHECK(again.content_hash() == raw_media.content_hash());

  // Generate with inline raw frames answers as with the inline video.
  v1::GenerateRequest with_video = FreshHistory(clip, video_turn.text);
  v1::GenerateRequest with_raw = with_video;
  v1::InlineMedia* inline_raw = with_raw.mutable_media(0);
  inline_raw->clear_mime_type();
  *inline_raw->mutable_raw_frames() = rgb.raw;
  inline_raw->set_data(rgb.pixels);
  const TurnResult g_video = client.Generate(with_video);
  const TurnResult g_raw = client.Generate(with_raw);
  REQUIRE(g_video.status.error_message() == "");
  REQUIRE(g_raw.status.error_message() == "");
  CHECK(!g_video.text.empty());
  CHECK(g_raw.text == g_video.text);

  // Through the sandboxed media workers, with the model's frame size and normalisation, the
  // preprocessed frames are bit for bit the video's.
  v1::ModelInfo info;
  {
    grpc::ClientContext context;
    REQUIRE(StubFor(*server)->GetModelInfo(&context, {}, &info).ok());
  }
  media::PreprocessSpec spec;
  spec.height = spec.width = static_cast<int>(info.vision().image_size());
  for (int c = 0; c < 3; ++c) {
    spec.mean[c] = info.vision().image_mean(c);
    spec.std[c] = info.vision().image_std(c);
  }
  media::RawFrames description;
  description.width = rgb.raw.width();
  description.height = rgb.raw.height();
  description.stride_bytes = rgb.raw.stride_bytes();
  description.frame_count = rgb.raw.frame_count();
  description.timestamps_us.assign(rgb.raw.timestamps_us().begin(), rgb.raw.timestamps_us().end());
  const auto raw_path = dir.path() / "same.rgb24";
  {
    std::ofstream(raw_path, std::ios::binary)
        << media::EncodeRawFramesHeader(description) << rgb.pixels;
  }
  auto workers = server::CreateMediaBackend(config);
  REQUIRE(workers.ok());
  const media::FrameSamplingSpec sampling{.num_frames = 4};
  auto from_video =
      (*workers)->Decode(media::MediaSource::FromFile(dir.path(), "same.mp4"), sampling, spec, {});
  auto from_raw = (*workers)->Decode(media::MediaSource::FromFile(dir.path(), "same.rgb24"),
                                     sampling, spec, {});
  REQUIRE(from_video.ok());
  INFO(MessageOf(from_raw.status()));
  REQUIRE(from_raw.ok());
  CHECK(from_raw->frames.num_frames == 4);
  CHECK(from_raw->frames.height == from_video->frames.height);
  CHECK(from_raw->frames.data == from_video->frames.data);
}

TEST_CASE("real model: a prompt past the context is refused before any prefill",
          "[integration][server]") {
  auto server = StartRealServer(RealModelConfig());
  ChatClient client(StubFor(*server));
  const std::string session = client.NewSession();
  // About 60k tokens of text (under max_prompt_bytes), against a 4096-token context.
  std::string text;
  for (int i = 0; text.size() < 200 * 1024; ++i) text += std::to_string(i) + " ";
  const auto t0 = std::chrono::steady_clock::now();
  const TurnResult r = client.Ask(session, text);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(r.status.error_message(),
             Catch::Contains("max_position_embeddings") && Catch::Contains("4096"));
  CHECK(r.deltas == 0);
  CHECK(took < std::chrono::seconds(20));  // tokenized and refused, never prefilled
  // max_tokens past the context is capped, not refused: the turn ends with LENGTH at the
  // context.
  v1::ChatRequest request;
  request.set_session_id(session);
  request.set_text("Count.");
  request.mutable_sampling()->set_max_tokens(1u << 20);
  request.mutable_sampling()->set_ignore_eos(true);
  const TurnResult capped = client.Chat(request, {}, std::chrono::seconds(600));
  REQUIRE(capped.status.error_message() == "");
  REQUIRE(capped.stats);
  CHECK(capped.stats->finish_reason() == v1::FINISH_REASON_LENGTH);
  CHECK(capped.stats->prompt_tokens() + capped.stats->generated_tokens() == 4096);
}

TEST_CASE("real model: ignore_eos with max_tokens N ends LENGTH after N streamed ids",
          "[integration][server]") {
  auto server = StartRealServer(RealModelConfig());
  ChatClient client(StubFor(*server));
  for (uint32_t n : {1u, 7u, 20u}) {
    const std::string session = client.NewSession();
    v1::ChatRequest request;
    request.set_session_id(session);
    request.set_text("Say something.");
    request.mutable_sampling()->set_max_tokens(n);
    request.mutable_sampling()->set_ignore_eos(true);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = StubFor(*server)->Chat(&context, request);
    v1::ChatResponse response;
    int ids = 0;
    std::optional<v1::TurnStats> stats;
    while (reader->Read(&response)) {
      if (response.has_delta()) ids += response.delta().token_ids_size();
      if (response.has_stats()) stats = response.stats();
    }
    REQUIRE(reader->Finish().ok());
    REQUIRE(stats);
    INFO("max_tokens " << n);
    CHECK(stats->finish_reason() == v1::FINISH_REASON_LENGTH);
    CHECK(stats->generated_tokens() == n);
    CHECK(ids == static_cast<int>(n));
  }
}

TEST_CASE("real model: under KV pressure admitted turns finish, the rest are refused up front",
          "[integration][server]") {
  server::ServerConfig config = RealModelConfig();
  config.kvstore = "none";
  config.kv_budget_bytes = 6 << 20;  // a few long turns' worth
  config.max_running_per_principal = 0;
  auto server = StartRealServer(config);
  ChatClient client(StubFor(*server));
  std::vector<TurnResult> results(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      ChatClient c(StubFor(*server));
      v1::ChatRequest request;
      request.set_session_id(c.NewSession());
      request.set_text("Tell a long story number " + std::to_string(i) + ".");
      request.mutable_sampling()->set_max_tokens(400);
      request.mutable_sampling()->set_ignore_eos(true);
      results[i] = c.Chat(request, {}, std::chrono::seconds(600));
    });
  }
  for (auto& t : threads) t.join();
  int finished = 0;
  for (const TurnResult& r : results) {
    INFO(r.status.error_message());
    if (r.status.ok()) {
      ++finished;
      REQUIRE(r.stats);
      CHECK(r.stats->generated_tokens() == 400);
    } else {
      // Only ever refused before the first token, never killed mid-stream by KV pressure.
      CHECK(r.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
      CHECK(r.deltas == 0);
    }
  }
  CHECK(finished >= 1);
}

TEST_CASE("real model: a session deleted mid-turn and re-created answers as a new session",
          "[integration][server]") {
  TempDir dir;
  auto server = StartRealServer(RealModelConfig());
  ChatClient client(StubFor(*server));
  v1::CreateSessionRequest create;
  create.set_session_id("again");
  create.mutable_frames()->set_num_frames(4);
  create.mutable_sampling()->set_max_tokens(40);
  create.mutable_sampling()->set_ignore_eos(true);
  v1::Session session;
  REQUIRE(client.CreateSession(create, &session).ok());
  v1::Media media;
  REQUIRE(client.Upload("again", MakeTestClip(dir.path(), 1.0), &media).ok());
  // A long first answer, and the delete sent while the client holds the first delta: the tiny
  // model writes thousands of tokens a second, and its deltas coalesce behind a slow reader, so
  // a delete keyed to a later delta may never be sent, or land after the turn has ended.
  v1::ChatRequest first;
  first.set_session_id("again");
  first.set_text("What moves?");
  first.mutable_sampling()->set_max_tokens(3000);
  bool deleted = false;
  const TurnResult cut = client.Chat(first, [&](grpc::ClientContext&, int delta) {
    if (delta != 0) return;
    v1::DeleteSessionResponse freed;
    deleted = ChatClient(StubFor(*server)).DeleteSession("again", &freed).ok();
  });
  REQUIRE(deleted);
  INFO(cut.status.error_message());
  CHECK(cut.status.error_code() == grpc::StatusCode::CANCELLED);  // the delete stopped the turn
  REQUIRE(WaitUntil([&] { return client.CreateSession(create, &session).ok(); }));
  const TurnResult reborn = client.Ask("again", "What color is the circle?");
  REQUIRE(reborn.status.ok());
  REQUIRE(reborn.stats);
  CHECK(reborn.stats->cached_tokens() == 0);
  CHECK(reborn.stats->visual_tokens_before_pruning() == 0);  // it has no video of its own
  v1::CreateSessionRequest control_request = create;
  control_request.set_session_id("control");
  REQUIRE(client.CreateSession(control_request, &session).ok());
  CHECK(client.Ask("control", "What color is the circle?").text == reborn.text);
}

TEST_CASE("real model: a KV store that is down is visible in health and metrics, turns go on",
          "[integration][server]") {
  // A framezip-kvstore address where nothing listens.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  close(fd);
  server::ServerConfig config = RealModelConfig();
  config.kvstore = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  auto server = StartRealServer(config);
  CHECK(HealthOf(*server, "") == "SERVING");
  CHECK(WaitUntil([&] { return HealthOf(*server, "framezip.kvstore") == "NOT_SERVING"; },
                  std::chrono::seconds(30)));
  ChatClient client(StubFor(*server));
  const std::string session = client.NewSession();
  const TurnResult r = client.Ask(session, "Hello?");
  CHECK(r.status.ok());  // served, only its KV is not kept in the store
  // framezip_kv_store_commits_total{...,result="failed"} counts the turn's failed commit.
  CHECK(WaitUntil(
      [&] {
        const std::string text = HttpGet(server->metrics_port(), "/metrics");
        const size_t at = text.find("result=\"failed\"} ");
        return at != std::string::npos && text.compare(at + 17, 2, "0\n") != 0;
      },
      std::chrono::seconds(10)));
  CHECK(HttpGet(server->metrics_port(), "/metrics").find("framezip_kv_store_up{") !=
        std::string::npos);
}

}  // namespace
}  // namespace framezip::testing

namespace framezip::testing {
namespace {

// A real-model backend with two turns prepared: A (a short prompt, 8 tokens to generate) already
// started (prefilled, first token sampled), B (a long prompt) not yet stepped.
struct TwoTurns {
  std::shared_ptr<media::MediaBackend> media;
  std::unique_ptr<server::EngineBackend> backend;
  UnlimitedKv kv;
  server::PreparedTurn a, b;
};

std::unique_ptr<TwoTurns> StartTwoTurns(const server::ServerConfig& config) {
  auto t = std::make_unique<TwoTurns>();
  auto media = server::CreateMediaBackend(config);
  REQUIRE(media.ok());
  t->media = *media;
  auto backend = server::EngineBackend::Load(config, t->media);
  REQUIRE(backend.ok());
  t->backend = *std::move(backend);
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "item " + std::to_string(i) + ", ";
  auto a = t->backend->Prepare(TextTurn("a", "Hello", 8), t->kv);
  auto b = t->backend->Prepare(TextTurn("b", long_text, 4), t->kv);
  REQUIRE((a.ok() && b.ok()));
  t->a = *std::move(a);
  t->b = *std::move(b);
  std::vector<server::StepItem> start = {Item(t->a, t->a.prompt_tokens)};
  REQUIRE(t->backend->Step(start).ok());
  REQUIRE(start[0].status.ok());
  return t;
}

TEST_CASE("real model: a batch item the KV pool cannot serve fails alone, the others run",
          "[integration][server]") {
  server::ServerConfig config = RealModelConfig();
  config.kvstore = "none";
  const uint32_t chunk = 16;
  // With room to spare: the KV after A's start, and what B's first chunk adds (a page a layer).
  uint64_t after_a = 0, b_first_chunk = 0;
  {
    auto roomy = StartTwoTurns(config);
    after_a = roomy->backend->KvUsedBytes();
    std::vector<server::StepItem> first = {Item(roomy->b, chunk)};
    REQUIRE(roomy->backend->Step(first).ok());
    REQUIRE(first[0].status.ok());
    b_first_chunk = roomy->backend->KvUsedBytes() - after_a;
  }
  REQUIRE(b_first_chunk > 0);

  // Room for A and half of B's first chunk: B's pages cannot all be reserved, A's decode steps
  // need none beyond its open pages (8 tokens).
  config.kv_budget_bytes = static_cast<int64_t>(after_a + b_first_chunk / 2);
  auto tight = StartTwoTurns(config);
  REQUIRE(tight->backend->KvUsedBytes() == after_a);
  std::vector<server::StepItem> batch = {Item(tight->a, 0), Item(tight->b, chunk)};
  REQUIRE(tight->backend->Step(batch).ok());
  CHECK(batch[0].status.ok());
  CHECK(batch[0].emitted);  // A decoded
  CHECK(batch[1].status.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(batch[1].status.message()), Catch::Contains("cannot reserve"));
  CHECK(!batch[1].emitted);
  CHECK(tight->backend->KvUsedBytes() == after_a);  // nothing of B was stored, nothing leaked
}

}  // namespace
}  // namespace framezip::testing
