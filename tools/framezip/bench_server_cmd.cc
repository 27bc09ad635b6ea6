// framezip bench server: the serving benchmark. Runs against a running framezip-server
// (--server ADDR) or starts the server's code in this process on a model (--model DIR: the real
// engine behind the real scheduler and gRPC service on 127.0.0.1:0).
//
// For each concurrency level (default 1, 4, 16) that many sessions each upload the video and ask
// two questions (--protocol http: each a conversation over the OpenAI-compatible API, resent in
// full, the video inline), in lockstep phases: every session's turn 1 starts together, then every
// turn 2. Reported, as the client sees them: TTFT and inter-token latency p50/p99, the aggregate
// decode throughput (turn-2 tokens over the turn-2 phase's wall time: turn 2 prefills a few text
// tokens only, so the phase is decode), turn 1's TTFT over turn 2's on the same video (the session
// KV reuse; target >= 10x at concurrency 1), the steady-state decode throughput (tokens after each
// session's first over the window from the earliest first token to the latest last one, from the
// server's per-turn stats), the all-running decode throughput (tokens that arrive while every
// session is decoding: from the latest first token to the earliest last one), and the latter at
// the highest level over the lowest (continuous batching; target >= 4x for 16 vs 1). --ignore-eos
// (default on) makes every turn generate exactly --max-tokens tokens so levels compare like for
// like. --rounds N runs the whole sweep N times; the scaling is then the median of the rounds' own
// ratios. In process, --kvstore picks the session KV store (embedded, none, or a framezip-kvstore
// address: with `framezip-kvstore --test-put-delay-ms 200` it measures serving over a slow store)
// and --share-sessions whether replicas would share sessions through it.
#include <absl/strings/escaping.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "framezip/v1/video_chat.grpc.pb.h"
#include "server/engine_factory.h"
#include "server/media_backend_factory.h"
#include "server/video_chat_server.h"
#include "tools/bench/bench_report.h"
#include "tools/framezip/bench_server_http.h"
#include "tools/framezip/bench_stats.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/subcommands.h"

namespace framezip::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

SteadyClock::duration ToDuration(double seconds) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(seconds));
}

struct Samples {
  std::mutex mu;
  std::vector<double> ttft[2];  // client-side, per turn number
  std::vector<double> itl;
  uint64_t generated[2] = {0, 0};
  // Turn 2's decode window: the earliest first token and the latest turn end over sessions,
  // and the tokens decoded after each session's first one.
  SteadyClock::time_point decode_begin = SteadyClock::time_point::max();
  SteadyClock::time_point decode_end = SteadyClock::time_point::min();
  uint64_t decoded_after_first = 0;
  // Turn 2's token arrivals per session, client-side: (time, tokens in the delta).
  std::vector<std::vector<std::pair<SteadyClock::time_point, int>>> turn2_arrivals;
  int failures = 0;
  std::string first_error;
};

struct SessionPlan {
  const std::string* video = nullptr;
  int frames = 0;
  int max_tokens = 0;
  bool ignore_eos = true;
  int http_port = 0;  // > 0: sessions are conversations over the OpenAI API on 127.0.0.1:port
  // Each session's own number, in its first question: conversations of one principal that are
  // identical word for word share one root (server/conversation_reuse.h), which real clients'
  // conversations do not.
  int viewer = 0;
};

// A session over the OpenAI-compatible API: the same two questions, each request resending the
// whole conversation (the video inline as a data: URL), as a stateless client does; turn 2
// restores turn 1's KV through the server's conversation reuse. Same phases as RunSession.
template <typename Barrier>
void RunHttpSession(const SessionPlan& plan, Barrier& phase, Samples& samples) {
  using nlohmann::json;
  bool ok = true;
  json messages = json::array();
  const std::string questions[2] = {
      fmt::format("What happens in the video? I am viewer {}.", plan.viewer),
      "What happens after that?"};
  for (int turn = 0; turn < 2; ++turn) {
    phase.arrive_and_wait();
    if (!ok) continue;
    json content = json::array();
    if (turn == 0 && !plan.video->empty()) {
      json video = json::object();
      video["type"] = "video_url";
      video["video_url"]["url"] = "data:video/mp4;base64," + absl::Base64Escape(*plan.video);
      content.push_back(video);
    }
    json text = json::object();
    text["type"] = "text";
    text["text"] = questions[turn];
    content.push_back(text);
    messages.push_back({{"role", "user"}, {"content", content}});
    json body = {{"messages", messages},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}},
                 {"max_tokens", plan.max_tokens},
                 {"temperature", 0}};
    body["framezip"]["ignore_eos"] = plan.ignore_eos;
    if (plan.frames > 0) body["framezip"]["frames"]["num_frames"] = plan.frames;
    const HttpChatResult r = HttpChatTurn(plan.http_port, body.dump());
    if (!r.error.empty()) {
      std::lock_guard lock(samples.mu);
      ++samples.failures;
      if (samples.first_error.empty()) samples.first_error = r.error;
      ok = false;
      continue;
    }
    messages.push_back({{"role", "assistant"}, {"content", r.answer}});
    const auto first = r.arrivals.empty() ? r.end : r.arrivals.front();
    std::vector<double> gaps;
    std::vector<std::pair<SteadyClock::time_point, int>> arrivals;
    for (size_t i = 0; i < r.arrivals.size(); ++i) {
      arrivals.emplace_back(r.arrivals[i], 1);
      if (i > 0)
        gaps.push_back(std::chrono::duration<double>(r.arrivals[i] - r.arrivals[i - 1]).count());
    }
    std::lock_guard lock(samples.mu);
    samples.ttft[turn].push_back(std::chrono::duration<double>(first - r.start).count());
    samples.itl.insert(samples.itl.end(), gaps.begin(), gaps.end());
    samples.generated[turn] += r.completion_tokens;
    if (turn == 1) {
      samples.decode_begin = std::min(samples.decode_begin, first);
      samples.decode_end = std::max(samples.decode_end, r.end);
      samples.decoded_after_first += r.completion_tokens > 0 ? r.completion_tokens - 1 : 0;
      if (!arrivals.empty()) samples.turn2_arrivals.push_back(std::move(arrivals));
    }
  }
  phase.arrive_and_wait();
}

// One session: upload, then two turns, each started when every session reached the phase
// (`phase` is arrived at three times per session, whatever happens, so no thread waits forever).
template <typename Barrier>
void RunSession(v1::VideoChat::Stub& stub, const SessionPlan& plan, Barrier& phase,
                Samples& samples) {
  if (plan.http_port > 0) return RunHttpSession(plan, phase, samples);
  bool ok = true;
  auto fail = [&](const grpc::Status& s) {
    std::lock_guard lock(samples.mu);
    ++samples.failures;
    if (samples.first_error.empty()) samples.first_error = s.error_message();
    ok = false;
  };
  v1::Session session;
  {
    grpc::ClientContext context;
    v1::CreateSessionRequest create;
    if (plan.frames > 0) create.mutable_frames()->set_num_frames(plan.frames);
    create.mutable_sampling()->set_temperature(0);
    if (grpc::Status s = stub.CreateSession(&context, create, &session); !s.ok()) fail(s);
  }
  if (ok && !plan.video->empty()) {
    grpc::ClientContext context;
    v1::Media media;
    auto writer = stub.UploadMedia(&context, &media);
    v1::UploadMediaRequest first;
    first.mutable_metadata()->set_session_id(session.session_id());
    first.mutable_metadata()->set_name("bench.mp4");
    first.mutable_metadata()->set_declared_size_bytes(plan.video->size());
    writer->Write(first);
    for (size_t off = 0; off < plan.video->size(); off += 1 << 20) {
      v1::UploadMediaRequest chunk;
      chunk.set_chunk(plan.video->substr(off, 1 << 20));
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    if (grpc::Status s = writer->Finish(); !s.ok()) fail(s);
  }
  const std::string questions[2] = {
      fmt::format("What happens in the video? I am viewer {}.", plan.viewer),
      "What happens after that?"};
  for (int turn = 0; turn < 2; ++turn) {
    phase.arrive_and_wait();
    if (!ok) continue;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    v1::ChatRequest request;
    request.set_session_id(session.session_id());
    request.set_text(questions[turn]);
    request.mutable_sampling()->set_max_tokens(static_cast<uint32_t>(plan.max_tokens));
    request.mutable_sampling()->set_ignore_eos(plan.ignore_eos);
    const auto start = SteadyClock::now();
    auto reader = stub.Chat(&context, request);
    v1::ChatResponse response;
    std::vector<std::pair<SteadyClock::time_point, int>> arrivals;
    StreamTiming timing(start);
    v1::TurnStats stats;
    while (reader->Read(&response)) {
      const auto now = SteadyClock::now();
      if (response.has_delta()) {
        arrivals.emplace_back(now, std::max(1, response.delta().token_ids_size()));
        timing.OnDelta(now, response.delta().token_ids_size());
      } else if (response.has_stats()) {
        stats = response.stats();
      }
    }
    if (grpc::Status s = reader->Finish(); !s.ok()) {
      fail(s);
      continue;
    }
    std::lock_guard lock(samples.mu);
    // A turn whose first tokens decode to no text yet still has a first token: the server's TTFT.
    samples.ttft[turn].push_back(timing.ttft() >= 0 ? timing.ttft()
                                                    : stats.time_to_first_token_seconds());
    samples.itl.insert(samples.itl.end(), timing.gaps().begin(), timing.gaps().end());
    samples.generated[turn] += stats.generated_tokens();
    if (turn == 1) {
      // The server's own first-token and end times (from the request's arrival, which on
      // loopback is this call's start): text deltas may lag tokens (a model whose tokens decode
      // to no text yet streams them late), the turn's stats do not.
      samples.decode_begin =
          std::min(samples.decode_begin, start + ToDuration(stats.time_to_first_token_seconds()));
      samples.decode_end = std::max(samples.decode_end, start + ToDuration(stats.e2e_seconds()));
      const uint64_t n = stats.generated_tokens();
      samples.decoded_after_first += n > 0 ? n - 1 : 0;
      if (!arrivals.empty()) samples.turn2_arrivals.push_back(std::move(arrivals));
    }
  }
  phase.arrive_and_wait();
  if (!ok) return;
  grpc::ClientContext context;
  v1::DeleteSessionRequest del;
  del.set_session_id(session.session_id());
  v1::DeleteSessionResponse deleted;
  stub.DeleteSession(&context, del, &deleted);
}

// Decode tokens per second while every session of the level is decoding: from the latest first
// token to the earliest last one. The steady figure's window (earliest first to latest last)
// also spans the steps in which later sessions' turn-2 prompts are prefilled (admission is
// staggered when requests arrive during a step) and the tail in which early finishers no longer
// decode; this one counts only batches of every session. 0 when the window is empty.
double AllRunningDecodeRate(
    const std::vector<std::vector<std::pair<SteadyClock::time_point, int>>>& sessions) {
  if (sessions.empty()) return 0;
  auto begin = SteadyClock::time_point::min();
  auto end = SteadyClock::time_point::max();
  for (const auto& a : sessions) {
    begin = std::max(begin, a.front().first);
    end = std::min(end, a.back().first);
  }
  if (end <= begin) return 0;
  uint64_t tokens = 0;
  for (const auto& a : sessions) {
    for (const auto& [t, k] : a) tokens += t > begin && t <= end ? static_cast<uint64_t>(k) : 0;
  }
  return static_cast<double>(tokens) / std::chrono::duration<double>(end - begin).count();
}

// What one level of one round measured.
struct LevelResult {
  std::vector<double> ttft[2];  // per turn number
  std::vector<double> itl;
  double decode = 0;       // turn-2 tokens over the turn-2 phase
  double steady = 0;       // 0 when the window is empty
  double all_running = 0;  // 0 when the window is empty
};

// The highest level's decode rate over the lowest's in one round, both through the narrowest
// window that both have: all running, else steady, else the turn-2 phase.
double ScalingRatio(const LevelResult& low, const LevelResult& high) {
  auto ratio = [](double a, double b) { return a > 0 ? b / a : 0; };
  if (low.all_running > 0 && high.all_running > 0) return ratio(low.all_running, high.all_running);
  if (low.steady > 0 && high.steady > 0) return ratio(low.steady, high.steady);
  return ratio(low.decode, high.decode);
}

// `c` sessions through upload, turn 1, turn 2 and delete, in lockstep phases.
StatusOr<LevelResult> MeasureLevel(v1::VideoChat::Stub& stub, const SessionPlan& plan, int c) {
  Samples samples;
  // Phases: upload | turn 1 | turn 2 | delete; the main thread times turn 2's phase.
  SteadyClock::time_point turn2_start, turn2_end;
  int phase_number = 0;
  std::barrier phase(c, [&]() noexcept {
    ++phase_number;
    if (phase_number == 2) turn2_start = SteadyClock::now();
    if (phase_number == 3) turn2_end = SteadyClock::now();
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < c; ++i) {
    threads.emplace_back([&, i] {
      SessionPlan own = plan;
      own.viewer = i;
      RunSession(stub, own, phase, samples);
    });
  }
  for (auto& t : threads) t.join();
  if (samples.failures > 0) {
    return UnavailableError("{} of {} sessions failed: {}", samples.failures, c,
                            samples.first_error);
  }
  LevelResult r;
  r.ttft[0] = std::move(samples.ttft[0]);
  r.ttft[1] = std::move(samples.ttft[1]);
  r.itl = std::move(samples.itl);
  const double turn2_seconds = std::chrono::duration<double>(turn2_end - turn2_start).count();
  r.decode = turn2_seconds > 0 ? static_cast<double>(samples.generated[1]) / turn2_seconds : 0;
  // Steady-state decode: tokens after each session's first, over the window from the earliest
  // first token to the latest last token. The phase figure above also holds every session's
  // turn-2 prefill (run one sequence at a time), which this one leaves out.
  if (samples.decode_end > samples.decode_begin) {
    r.steady = static_cast<double>(samples.decoded_after_first) /
               std::chrono::duration<double>(samples.decode_end - samples.decode_begin).count();
  }
  r.all_running = AllRunningDecodeRate(samples.turn2_arrivals);
  return r;
}

// One level's figures over its rounds: latency percentiles over the pooled samples, rates as
// the median of the rounds' rates.
void AddLevel(bench::Report& report, int c, const std::vector<LevelResult>& rounds) {
  std::vector<double> ttft[2], itl, decode, steady, all_running;
  for (const LevelResult& r : rounds) {
    for (int turn = 0; turn < 2; ++turn) {
      ttft[turn].insert(ttft[turn].end(), r.ttft[turn].begin(), r.ttft[turn].end());
    }
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    decode.push_back(r.decode);
    if (r.steady > 0) steady.push_back(r.steady);
    if (r.all_running > 0) all_running.push_back(r.all_running);
  }
  std::vector<double> both = ttft[0];
  both.insert(both.end(), ttft[1].begin(), ttft[1].end());
  report.Add(fmt::format("ttft_p50_c{}", c), Percentile(both, 0.5), "s", std::nullopt, true);
  report.Add(fmt::format("ttft_p99_c{}", c), Percentile(both, 0.99), "s", std::nullopt, true);
  report.Add(fmt::format("turn1_ttft_p50_c{}", c), Percentile(ttft[0], 0.5), "s", std::nullopt,
             true);
  report.Add(fmt::format("turn2_ttft_p50_c{}", c), Percentile(ttft[1], 0.5), "s", std::nullopt,
             true);
  report.Add(fmt::format("itl_p50_c{}", c), Percentile(itl, 0.5), "s", std::nullopt, true);
  report.Add(fmt::format("itl_p99_c{}", c), Percentile(itl, 0.99), "s", std::nullopt, true);
  report.Add(fmt::format("decode_tok_s_c{}", c), Median(decode), "tok/s");
  if (!steady.empty()) {
    report.Add(fmt::format("decode_tok_s_steady_c{}", c), Median(steady), "tok/s");
  }
  if (!all_running.empty()) {
    report.Add(fmt::format("decode_tok_s_all_running_c{}", c), Median(all_running), "tok/s");
  }
}

// framezip-server's code in this process on `model_dir` (loopback, port 0, no metrics port).
StatusOr<std::unique_ptr<server::VideoChatServer>> StartInProcess(const std::string& model_dir,
                                                                  int max_running,
                                                                  const std::string& kvstore,
                                                                  const std::string& share) {
  server::ServerConfig config;
  config.kvstore = kvstore;
  config.share_sessions = share;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "";
  config.openai_listen = "127.0.0.1:0";  // for --protocol http
  config.model_dir = model_dir;
  config.max_running = max_running;
  config.max_waiting = std::max(64, 2 * max_running);
  FZ_ASSIGN_OR_RETURN(std::shared_ptr<media::MediaBackend> media,
                      server::CreateMediaBackend(config));
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<server::TurnEngine> engine,
                      server::CreateEngine(config, media));
  return server::VideoChatServer::Start(config, std::move(engine), media);
}

}  // namespace

int RunBenchServer(const std::vector<std::string>& args) {
  std::string server;
  std::string model_dir;
  std::string video_path;
  std::string levels = "1,4,16";
  int max_tokens = 32;
  int frames = 64;
  bool ignore_eos = true;
  int rounds = 1;
  bool json = false;
  std::string kvstore = "embedded";
  std::string share_sessions = "off";
  std::string protocol = "grpc";
  FlagSet flags("framezip bench server",
                "Serving benchmark against a running framezip-server (--server) or the server's "
                "code started in this process on a model (--model): TTFT/ITL p50/p99 per "
                "concurrency, aggregate decode tok/s, turn-1/turn-2 TTFT, decode scaling.");
  flags.String("server", &server, "address of a running framezip-server", "ADDR");
  flags.String("model", &model_dir, "start the server in-process on this model directory", "DIR");
  flags.String("video", &video_path, "video each session uploads before its turns", "FILE");
  flags.Int("frames", &frames, "frames sampled from the video per session (0 = server default)");
  flags.String("concurrency", &levels, "comma-separated concurrency levels", "LIST");
  flags.Int("max-tokens", &max_tokens, "tokens generated per turn at most");
  flags.Bool("ignore-eos", &ignore_eos,
             "generate max-tokens tokens every turn (do not stop at end-of-turn)");
  flags.Int("rounds", &rounds,
            "run every level this many times, interleaved; rates and ratios are the median over "
            "rounds, latency percentiles are over all rounds' samples");
  flags.Bool("json", &json, "print one JSON object as the last line");
  flags.String("kvstore", &kvstore,
               "with --model: the session KV store (embedded, none, or a framezip-kvstore address)",
               "ADDR");
  flags.String("share-sessions", &share_sessions,
               "with --model: share sessions through the store (auto, on, off)", "MODE");
  flags.String("protocol", &protocol,
               "grpc (sessions: upload, then Chat turns) or http (the OpenAI-compatible API: each "
               "request resends the conversation with the video inline; --server is then the "
               "API's 127.0.0.1:PORT)",
               "NAME");
  if (auto code = ParseOrExit(flags, args)) return *code;
  if (rounds < 1) {
    std::fprintf(stderr, "framezip bench server: --rounds must be at least 1, got %d\n", rounds);
    return 2;
  }
  if (protocol != "grpc" && protocol != "http") {
    std::fprintf(stderr, "framezip bench server: --protocol must be grpc or http, got '%s'\n",
                 protocol.c_str());
    return 2;
  }
  if (server.empty() == model_dir.empty()) {
    std::fprintf(stderr,
                 "framezip bench server: give exactly one of --server ADDR (a running "
                 "framezip-server) or --model DIR (start one in this process)\n");
    return 2;
  }
  std::string video;
  if (!video_path.empty()) {
    std::ifstream in(video_path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "framezip bench server: --video: cannot read %s\n", video_path.c_str());
      return 2;
    }
    std::ostringstream out;
    out << in.rdbuf();
    video = out.str();
  }
  std::vector<int> concurrency;
  std::stringstream list(levels);
  for (std::string item; std::getline(list, item, ',');) {
    const int c = std::atoi(item.c_str());
    if (c <= 0) {
      std::fprintf(stderr, "framezip bench server: --concurrency: '%s' is not a positive number\n",
                   item.c_str());
      return 2;
    }
    concurrency.push_back(c);
  }

  std::unique_ptr<server::VideoChatServer> in_process;
  if (!model_dir.empty()) {
    const int most = *std::max_element(concurrency.begin(), concurrency.end());
    StatusOr<std::unique_ptr<server::VideoChatServer>> started =
        StartInProcess(model_dir, std::max(16, most), kvstore, share_sessions);
    if (!started.ok()) {
      std::fprintf(stderr, "framezip bench server: %s\n", MessageOf(started.status()).c_str());
      return 1;
    }
    in_process = std::move(*started);
    server = "127.0.0.1:" +
             std::to_string(protocol == "http" ? in_process->openai_port() : in_process->port());
  }
  int http_port = 0;
  if (protocol == "http") {
    http_port = std::atoi(server.substr(server.rfind(':') + 1).c_str());
    if (http_port <= 0 || server.rfind("127.0.0.1:", 0) != 0) {
      std::fprintf(stderr,
                   "framezip bench server: --protocol http needs --server 127.0.0.1:PORT "
                   "(the OpenAI API's port) or --model\n");
      return 2;
    }
  }
  auto channel = grpc::CreateChannel(server, grpc::InsecureChannelCredentials());
  auto stub = v1::VideoChat::NewStub(channel);
  bench::Machine machine = bench::DetectMachine();
  machine.threads = static_cast<int>(std::thread::hardware_concurrency());
  bench::Report report(protocol == "http" ? "server_http" : "server", machine);
  const SessionPlan plan{&video, video.empty() ? 0 : frames, max_tokens, ignore_eos, http_port};
  // Every round runs every level once, in order, so each round's levels are measured minutes
  // apart on the same host; the scaling is each round's own ratio, and with --rounds > 1 its
  // median over rounds is the headline (a shared host's speed drifts between minutes).
  std::vector<std::vector<LevelResult>> by_level(concurrency.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t li = 0; li < concurrency.size(); ++li) {
      StatusOr<LevelResult> level = MeasureLevel(*stub, plan, concurrency[li]);
      if (!level.ok()) {
        std::fprintf(stderr, "framezip bench server: %s\n", MessageOf(level.status()).c_str());
        return 1;
      }
      std::fprintf(stderr, "round %d/%d, %d sessions: decode %.2f tok/s (all running %.2f)\n",
                   round + 1, rounds, concurrency[li], level->decode, level->all_running);
      by_level[li].push_back(std::move(*level));
    }
  }
  for (size_t li = 0; li < concurrency.size(); ++li) {
    AddLevel(report, concurrency[li], by_level[li]);
  }
  // At the first concurrency level: turn 1 reads the video, turn 2 reuses the session's KV.
  std::vector<double> ttft_ratios;
  for (const LevelResult& r : by_level.front()) {
    const double t1 = Percentile(r.ttft[0], 0.5), t2 = Percentile(r.ttft[1], 0.5);
    ttft_ratios.push_back(t2 > 0 ? t1 / t2 : 0);
  }
  report.Add("turn1_over_turn2_ttft", Median(ttft_ratios), "x",
             video.empty() ? std::nullopt : std::optional<double>(10.0));
  if (concurrency.size() > 1) {
    std::vector<double> scaling;
    for (int round = 0; round < rounds; ++round) {
      scaling.push_back(ScalingRatio(by_level.front()[round], by_level.back()[round]));
    }
    const std::string name =
        fmt::format("decode_scaling_c{}_over_c{}", concurrency.back(), concurrency.front());
    if (rounds > 1) {
      report.Add(name + "_min", *std::min_element(scaling.begin(), scaling.end()), "x");
      report.Add(name + "_max", *std::max_element(scaling.begin(), scaling.end()), "x");
    }
    report.Add(name, Median(scaling), "x",
               concurrency.back() >= 16 && concurrency.front() == 1 ? std::optional<double>(4.0)
                                                                    : std::nullopt);
  }
  if (in_process) in_process->Drain(std::chrono::milliseconds(1000));
  if (json) std::printf("%s\n", report.Json().c_str());
  return 0;
}

}  // namespace framezip::cli
