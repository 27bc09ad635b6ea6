// framezip bench sessions: how many multi-turn video-chat sessions one KV budget holds per
// compression policy, and what they see while it fills. Runs against the server's code started
// in this process on a model (--model DIR: the real engine behind the real scheduler and gRPC
// service on 127.0.0.1:0, with --kv-budget-mib, or --memory-budget-mib for weights and KV
// together (so --weight-format int8 or fp8 leaves more KV), and no session KV store, so nothing
// leaves engine memory) or a running framezip-server (--server ADDR: its own budget; start it with
// `--kvstore none`, or idle sessions are evicted to the store instead of refused).
//
// For each frame count (--frames, default 64 and 256) and each policy (--policies), sessions
// arrive at a fixed rate (--arrival-rate per second). Each creates a session with the policy,
// uploads a clip of exactly F decoded RGB24 frames (synthetic, or --video's container), asks
// turn 1 (prefills the video), waits --think-seconds and asks turn 2 (on the turn-1 KV), then
// stays idle holding its KV, as a user reading the answer does. Arrivals stop at the first turn
// the KV budget refuses (RESOURCE_EXHAUSTED "KV budget exceeded") or after --max-sessions. The
// sessions whose two turns were answered are the resident ones; then they are all deleted before
// the next policy. `none` is what an uncompressed server (vLLM's prefix cache) holds in the same
// budget.
//
// Reported once, from the server's GetModelInfo: kv_budget_mib (what the KV pool was given) and
// weights_mib (what the loaded weights take). Reported per policy and frame count (suffix
// _<policy>_f<F>, the policy's non-alphanumerics as
// '_'): sessions_resident, kv_resident_mib (engine KV the resident sessions hold, from
// GetSession), kv_per_session_kib, budget_reached (1 when a turn was refused, 0 when
// --max-sessions came first), turn-1 and turn-2 TTFT p50/p99 and inter-token latency p99 as the
// client sees them, and decode_tok_s: every generated token over the run's wall time, from the
// first arrival to the last turn's end (an open-loop figure: below saturation it follows the
// arrival rate). For each compressing policy: sessions over none's (target >= 3) and turn-2 TTFT
// p99 over none's (target <= 1).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "framezip/v1/video_chat.grpc.pb.h"
#include "server/engine_factory.h"
#include "server/media_backend_factory.h"
#include "server/video_chat_server.h"
#include "tools/bench/bench_report.h"
#include "tools/framezip/bench_stats.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/policy_flag.h"
#include "tools/framezip/subcommands.h"

namespace framezip::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

// What every session uploads: a container file, or F raw RGB24 frames.
struct Clip {
  std::string bytes;
  bool raw = false;
  int width = 0, height = 0, frames = 0;
};

// F frames of a square moving across a gradient (so frames differ, as a video's do), 10 fps.
Clip SyntheticClip(int frames, int size) {
  Clip clip{std::string(static_cast<size_t>(frames) * size * size * 3, '\0'), true, size, size,
            frames};
  const int side = std::max(1, size / 4);
  for (int f = 0; f < frames; ++f) {
    const int x0 = (f * 3) % std::max(1, size - side), y0 = (f * 5) % std::max(1, size - side);
    for (int y = 0; y < size; ++y) {
      for (int x = 0; x < size; ++x) {
        const bool in = x >= x0 && x < x0 + side && y >= y0 && y < y0 + side;
        char* px = clip.bytes.data() + ((static_cast<size_t>(f) * size + y) * size + x) * 3;
        px[0] = static_cast<char>(in ? 230 : (x * 255) / size);
        px[1] = static_cast<char>(in ? 40 : (y * 255) / size);
        px[2] = static_cast<char>(in ? 40 : 96);
      }
    }
  }
  return clip;
}

grpc::Status Upload(v1::VideoChat::Stub& stub, const std::string& session_id, const Clip& clip) {
  grpc::ClientContext context;
  v1::Media media;
  auto writer = stub.UploadMedia(&context, &media);
  v1::UploadMediaRequest first;
  v1::MediaMetadata& meta = *first.mutable_metadata();
  meta.set_session_id(session_id);
  meta.set_declared_size_bytes(clip.bytes.size());
  if (clip.raw) {
    meta.set_name("bench.rgb24");
    meta.set_mime_type("video/x-raw-rgb24");
    v1::RawFrames& raw = *meta.mutable_raw_frames();
    raw.set_width(static_cast<uint32_t>(clip.width));
    raw.set_height(static_cast<uint32_t>(clip.height));
    raw.set_stride_bytes(static_cast<uint32_t>(3 * clip.width));
    raw.set_frame_count(static_cast<uint32_t>(clip.frames));
    for (int f = 0; f < clip.frames; ++f) raw.add_timestamps_us(int64_t{100000} * f);
  } else {
    meta.set_name("bench.mp4");
  }
  writer->Write(first);
  for (size_t off = 0; off < clip.bytes.size(); off += 1 << 20) {
    v1::UploadMediaRequest chunk;
    chunk.set_chunk(clip.bytes.substr(off, 1 << 20));
    if (!writer->Write(chunk)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

struct RunPlan {
  const Clip* clip = nullptr;
  int frames = 0;
  v1::CompressionPolicy policy;
  int max_tokens = 0;
  bool ignore_eos = true;
  double think_seconds = 0;
};

// Everything one (policy, frames) run measured; guarded by `mu` while sessions run.
struct RunSamples {
  std::mutex mu;
  std::vector<double> ttft[2];
  std::vector<double> itl;
  uint64_t generated = 0;
  SteadyClock::time_point last_end = SteadyClock::time_point::min();
  std::vector<std::string> resident;   // sessions whose two turns were answered
  std::vector<std::string> to_delete;  // every session created
  int refused = 0;                     // turns the KV budget refused
  int failures = 0;                    // anything else
  std::string first_error;
  std::string first_refusal;
  std::atomic<bool> stop{false};
};

bool IsBudgetRefusal(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
         s.error_message().find("KV budget") != std::string::npos;
}

// One turn: its client-side TTFT and token gaps go to `samples` when it succeeds.
grpc::Status RunTurn(v1::VideoChat::Stub& stub, const RunPlan& plan, const std::string& session_id,
                     int turn, RunSamples& samples) {
  static const char* kQuestions[2] = {"What happens in the video?", "What happens after that?"};
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  v1::ChatRequest request;
  request.set_session_id(session_id);
  request.set_text(kQuestions[turn]);
  request.mutable_sampling()->set_max_tokens(static_cast<uint32_t>(plan.max_tokens));
  request.mutable_sampling()->set_ignore_eos(plan.ignore_eos);
  const auto start = SteadyClock::now();
  auto reader = stub.Chat(&context, request);
  v1::ChatResponse response;
  StreamTiming timing(start);
  v1::TurnStats stats;
  while (reader->Read(&response)) {
    if (response.has_delta()) {
      timing.OnDelta(SteadyClock::now(), response.delta().token_ids_size());
    } else if (response.has_stats()) {
      stats = response.stats();
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return status;
  std::lock_guard lock(samples.mu);
  samples.ttft[turn].push_back(timing.ttft() >= 0 ? timing.ttft()
                                                  : stats.time_to_first_token_seconds());
  samples.itl.insert(samples.itl.end(), timing.gaps().begin(), timing.gaps().end());
  samples.generated += stats.generated_tokens();
  samples.last_end = std::max(samples.last_end, SteadyClock::now());
  return status;
}

// One session: create, upload, turn 1, think, turn 2; it stays resident when both were answered.
void RunSession(v1::VideoChat::Stub& stub, const RunPlan& plan, RunSamples& samples) {
  auto fail = [&](const grpc::Status& s) {
    std::lock_guard lock(samples.mu);
    if (IsBudgetRefusal(s)) {
      ++samples.refused;
      if (samples.first_refusal.empty()) samples.first_refusal = s.error_message();
    } else {
      ++samples.failures;
      if (samples.first_error.empty()) samples.first_error = s.error_message();
    }
    samples.stop = true;
  };
  v1::Session session;
  {
    grpc::ClientContext context;
    v1::CreateSessionRequest create;
    create.mutable_frames()->set_num_frames(static_cast<uint32_t>(plan.frames));
    create.mutable_sampling()->set_temperature(0);
    *create.mutable_policy() = plan.policy;
    create.set_ttl_seconds(3600);
    if (grpc::Status s = stub.CreateSession(&context, create, &session); !s.ok()) return fail(s);
  }
  {
    std::lock_guard lock(samples.mu);
    samples.to_delete.push_back(session.session_id());
  }
  if (grpc::Status s = Upload(stub, session.session_id(), *plan.clip); !s.ok()) return fail(s);
  for (int turn = 0; turn < 2; ++turn) {
    if (turn == 1 && plan.think_seconds > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(plan.think_seconds));
    }
    if (grpc::Status s = RunTurn(stub, plan, session.session_id(), turn, samples); !s.ok()) {
      return fail(s);
    }
  }
  std::lock_guard lock(samples.mu);
  samples.resident.push_back(session.session_id());
}

// Engine KV (the device tier) the session holds now, from GetSession.
uint64_t SessionKvBytes(v1::VideoChat::Stub& stub, const std::string& session_id) {
  grpc::ClientContext context;
  v1::GetSessionRequest request;
  request.set_session_id(session_id);
  v1::Session session;
  if (!stub.GetSession(&context, request, &session).ok()) return 0;
  uint64_t bytes = 0;
  for (const v1::KvBytes& kv : session.kv_bytes()) {
    if (kv.tier() == v1::KV_TIER_DEVICE) bytes += kv.bytes();
  }
  return bytes;
}

struct RunResult {
  int resident = 0;
  bool budget_reached = false;
  uint64_t kv_resident_bytes = 0;
  double ttft[2][2] = {{0, 0}, {0, 0}};  // [turn][p50, p99]
  double itl_p99 = 0;
  double decode_tok_s = 0;
};

// Sessions arrive every 1/rate s until one is refused or max_sessions arrived; every session is
// deleted before returning.
StatusOr<RunResult> MeasureRun(v1::VideoChat::Stub& stub, const RunPlan& plan, double rate,
                               int max_sessions) {
  RunSamples samples;
  std::vector<std::thread> threads;
  const auto start = SteadyClock::now();
  for (int i = 0; i < max_sessions && !samples.stop; ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<SteadyClock::duration>(
                                              std::chrono::duration<double>(i / rate)));
    if (samples.stop) break;
    threads.emplace_back([&] { RunSession(stub, plan, samples); });
  }
  for (auto& t : threads) t.join();
  RunResult r;
  r.resident = static_cast<int>(samples.resident.size());
  r.budget_reached = samples.refused > 0;
  for (const std::string& id : samples.resident) r.kv_resident_bytes += SessionKvBytes(stub, id);
  for (const std::string& id : samples.to_delete) {
    grpc::ClientContext context;
    v1::DeleteSessionRequest del;
    del.set_session_id(id);
    v1::DeleteSessionResponse deleted;
    stub.DeleteSession(&context, del, &deleted);
  }
  if (samples.failures > 0) {
    return UnavailableError("{} of {} sessions failed: {}", samples.failures, threads.size(),
                            samples.first_error);
  }
  if (r.budget_reached) {
    std::fprintf(stderr, "  refused: %s\n", samples.first_refusal.c_str());
  }
  for (int turn = 0; turn < 2; ++turn) {
    r.ttft[turn][0] = Percentile(samples.ttft[turn], 0.5);
    r.ttft[turn][1] = Percentile(samples.ttft[turn], 0.99);
  }
  r.itl_p99 = Percentile(samples.itl, 0.99);
  if (samples.last_end > start) {
    r.decode_tok_s = static_cast<double>(samples.generated) /
                     std::chrono::duration<double>(samples.last_end - start).count();
  }
  return r;
}

// framezip-server's code in this process on `model_dir`: loopback, port 0, no metrics, no session
// KV store (so the budget refuses instead of evicting), no per-caller caps (all sessions are one
// caller here), room for every session and frame count.
// The engine a --model run starts: where, its weights, and how its KV pool is sized (a KV
// budget, or a memory budget the weights take their share of first).
struct InProcessEngine {
  std::string model_dir;
  std::string device;
  std::string weight_format;
  int64_t kv_budget_bytes = 0;
  int64_t memory_budget_bytes = 0;
};

StatusOr<std::unique_ptr<server::VideoChatServer>> StartInProcess(const InProcessEngine& wanted,
                                                                  int max_running, int max_frames,
                                                                  int max_sessions) {
  server::ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "";
  config.model_dir = wanted.model_dir;
  config.device = wanted.device;
  config.weight_format = wanted.weight_format;
  if (wanted.memory_budget_bytes > 0) {
    config.memory_budget_bytes = wanted.memory_budget_bytes;
  } else {
    config.kv_budget_bytes = wanted.kv_budget_bytes;
  }
  config.kvstore = "none";
  config.max_running = max_running;
  config.max_waiting = std::max(4096, 2 * max_sessions);
  config.max_running_per_principal = 0;
  config.max_queued_tokens_per_principal = 0;
  config.max_sessions = max_sessions + 64;
  config.max_frames = max_frames;
  FZ_RETURN_IF_ERROR(server::ValidateServerConfig(config));
  FZ_ASSIGN_OR_RETURN(std::shared_ptr<media::MediaBackend> media,
                      server::CreateMediaBackend(config));
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<server::TurnEngine> engine,
                      server::CreateEngine(config, media));
  return server::VideoChatServer::Start(config, std::move(engine), media);
}

StatusOr<v1::ModelInfo> GetModelInfo(v1::VideoChat::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ModelInfo info;
  const grpc::Status status = stub.GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
  if (!status.ok()) {
    return Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return info;
}

// "attentionpack:factors=int4" -> "attentionpack_factors_int4" (a result-name suffix).
std::string Label(const std::string& policy) {
  std::string out = policy;
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return out;
}

StatusOr<std::vector<int>> ParsePositiveList(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > 65536) {
      return InvalidArgumentError("{}: '{}' is not a positive number", flag, item);
    }
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) return InvalidArgumentError("{}: empty list", flag);
  return out;
}

}  // namespace

int RunBenchSessions(const std::vector<std::string>& args) {
  std::string server;
  std::string model_dir;
  std::string device = "cpu";
  std::string video_path;
  std::string frames_list = "64,256";
  std::string policies_list = "none;kivi;zipvl;attentionpack:factors=int4;dynamic_llava";
  double kv_budget_mib = 32;
  double memory_budget_mib = 0;
  std::string weight_format = "bf16";
  double rate = 4;
  double think_seconds = 0;
  int max_sessions = 2000;
  int max_running = 16;
  int max_tokens = 8;
  int frame_size = 64;
  bool ignore_eos = true;
  bool json = false;
  FlagSet flags("framezip bench sessions",
                "Sessions one KV budget holds per compression policy: sessions arrive at a fixed "
                "rate, each uploads a video of F frames and asks two questions, until the budget "
                "refuses a turn; resident sessions, turn-1/turn-2 TTFT p50/p99, ITL p99, decode "
                "tok/s per policy and F.");
  flags.String("server", &server,
               "address of a running framezip-server (its own KV budget; run it with --kvstore "
               "none)",
               "ADDR");
  flags.String("model", &model_dir, "start the server in-process on this model directory", "DIR");
  flags.String("device", &device, "with --model: the engine's device (cpu, cuda, cuda:N)", "D");
  flags.Double("kv-budget-mib", &kv_budget_mib, "with --model: the engine's KV budget in MiB");
  flags.Double("memory-budget-mib", &memory_budget_mib,
               "with --model: weights and KV together in MiB, in place of --kv-budget-mib (the "
               "KV pool gets what the weights leave); 0 = off");
  flags.String("weight-format", &weight_format,
               "with --model: the decoder's weights, bf16, int8 (CPU) or fp8 (GPU), as "
               "framezip-server's --weight-format",
               "FORMAT");
  flags.String("frames", &frames_list, "comma-separated frame counts per video", "LIST");
  flags.String("policies", &policies_list,
               "';'-separated policies, each NAME[:KEY=VALUE,...] as `framezip chat --policy` "
               "takes them",
               "LIST");
  flags.Double("arrival-rate", &rate, "sessions arriving per second");
  flags.Double("think-seconds", &think_seconds, "pause between a session's turn 1 and turn 2");
  flags.Int("max-sessions", &max_sessions, "stop arrivals after this many sessions per run");
  flags.Int("max-running", &max_running, "with --model: sequences in one batch");
  flags.Int("max-tokens", &max_tokens, "tokens generated per turn at most");
  flags.Bool("ignore-eos", &ignore_eos, "generate max-tokens tokens every turn");
  flags.Int("frame-size", &frame_size,
            "side in pixels of the synthetic frames uploaded when there is no --video");
  flags.String("video", &video_path,
               "upload this container file instead of synthetic raw frames (its frames are "
               "sampled F times)",
               "FILE");
  flags.Bool("json", &json, "print one JSON object as the last line");
  if (auto code = ParseOrExit(flags, args)) return *code;
  auto usage = [](const std::string& message) {
    std::fprintf(stderr, "framezip bench sessions: %s\n", message.c_str());
    return 2;
  };
  if (server.empty() == model_dir.empty()) {
    return usage(
        "give exactly one of --server ADDR (a running framezip-server) or --model DIR "
        "(start one in this process)");
  }
  if (!(rate > 0)) return usage(fmt::format("--arrival-rate must be above 0, got {}", rate));
  // At most 1 PiB: the bytes must fit an int64 (and no machine has more).
  constexpr double kMostMib = double(int64_t{1} << 30);
  if (!(kv_budget_mib > 0 && kv_budget_mib <= kMostMib)) {
    return usage(fmt::format("--kv-budget-mib must be above 0 and at most {}, got {}", kMostMib,
                             kv_budget_mib));
  }
  if (!(memory_budget_mib >= 0 && memory_budget_mib <= kMostMib)) {
    return usage(fmt::format("--memory-budget-mib must be >= 0 and at most {}, got {}", kMostMib,
                             memory_budget_mib));
  }
  if (max_sessions < 1) return usage("--max-sessions must be at least 1");
  if (max_tokens < 1) return usage("--max-tokens must be at least 1");
  if (think_seconds < 0) return usage("--think-seconds must be >= 0");
  if (frame_size < 8 || frame_size > 4096) return usage("--frame-size must be in [8, 4096]");
  StatusOr<std::vector<int>> frame_counts = ParsePositiveList("--frames", frames_list);
  if (!frame_counts.ok()) return usage(MessageOf(frame_counts.status()));
  std::vector<std::string> policies;
  std::vector<v1::CompressionPolicy> parsed;
  {
    std::stringstream list(policies_list);
    for (std::string item; std::getline(list, item, ';');) {
      if (item.empty()) continue;
      v1::CompressionPolicy p;
      if (Status s = ParsePolicyFlag(item, p); !s.ok()) {
        return usage("--policies: " + MessageOf(s));
      }
      policies.push_back(item);
      parsed.push_back(p);
    }
  }
  if (policies.empty()) return usage("--policies: empty list");
  std::string video;
  if (!video_path.empty()) {
    std::ifstream in(video_path, std::ios::binary);
    if (!in) return usage("--video: cannot read " + video_path);
    std::ostringstream out;
    out << in.rdbuf();
    video = out.str();
  }

  bench::Machine machine = bench::DetectMachine();
  machine.threads = static_cast<int>(std::thread::hardware_concurrency());
  bench::Report report("sessions", machine);
  const InProcessEngine engine{model_dir, device, weight_format,
                               static_cast<int64_t>(kv_budget_mib * 1024 * 1024),
                               static_cast<int64_t>(memory_budget_mib * 1024 * 1024)};
  if (!model_dir.empty() && memory_budget_mib > 0) {
    report.Add("memory_budget_mib", memory_budget_mib, "MiB");
  }
  report.Add("arrival_rate", rate, "sessions/s");
  bool reported_model = false;
  const int most_frames = *std::max_element(frame_counts->begin(), frame_counts->end());
  for (const int frames : *frame_counts) {
    const Clip clip = video.empty() ? SyntheticClip(frames, frame_size) : Clip{video};
    std::map<std::string, RunResult> by_policy;
    for (size_t pi = 0; pi < policies.size(); ++pi) {
      // A fresh server per run with --model, so no run inherits another's pages or caches.
      std::unique_ptr<server::VideoChatServer> in_process;
      std::string address = server;
      if (!model_dir.empty()) {
        StatusOr<std::unique_ptr<server::VideoChatServer>> started =
            StartInProcess(engine, max_running, most_frames, max_sessions);
        if (!started.ok()) {
          std::fprintf(stderr, "framezip bench sessions: %s\n",
                       MessageOf(started.status()).c_str());
          return 1;
        }
        in_process = std::move(*started);
        address = "127.0.0.1:" + std::to_string(in_process->port());
      }
      auto stub =
          v1::VideoChat::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
      if (!reported_model) {
        // The budget the server really has (what a memory budget left the KV pool, or a running
        // server's own), and its weights' share.
        StatusOr<v1::ModelInfo> info = GetModelInfo(*stub);
        if (!info.ok()) {
          std::fprintf(stderr, "framezip bench sessions: GetModelInfo: %s\n",
                       MessageOf(info.status()).c_str());
          return 1;
        }
        report.Add("kv_budget_mib", static_cast<double>(info->kv_budget_bytes()) / (1 << 20),
                   "MiB");
        report.Add("weights_mib", static_cast<double>(info->weight_bytes()) / (1 << 20), "MiB");
        reported_model = true;
      }
      const RunPlan plan{&clip, frames, parsed[pi], max_tokens, ignore_eos, think_seconds};
      StatusOr<RunResult> run = MeasureRun(*stub, plan, rate, max_sessions);
      if (in_process) in_process->Drain(std::chrono::milliseconds(1000));
      if (!run.ok()) {
        std::fprintf(stderr, "framezip bench sessions: --policies %s, %d frames: %s\n",
                     policies[pi].c_str(), frames, MessageOf(run.status()).c_str());
        return 1;
      }
      std::fprintf(stderr, "%s, %d frames: %d sessions resident (%s)\n", policies[pi].c_str(),
                   frames, run->resident,
                   run->budget_reached ? "budget reached" : "--max-sessions reached");
      const std::string suffix = fmt::format("_{}_f{}", Label(policies[pi]), frames);
      report.Add("sessions_resident" + suffix, run->resident, "sessions");
      report.Add("budget_reached" + suffix, run->budget_reached ? 1 : 0, "bool");
      report.Add("kv_resident_mib" + suffix,
                 static_cast<double>(run->kv_resident_bytes) / (1024.0 * 1024.0), "MiB");
      report.Add("kv_per_session_kib" + suffix,
                 run->resident > 0
                     ? static_cast<double>(run->kv_resident_bytes) / 1024.0 / run->resident
                     : 0,
                 "KiB");
      for (int turn = 0; turn < 2; ++turn) {
        report.Add(fmt::format("turn{}_ttft_p50{}", turn + 1, suffix), run->ttft[turn][0], "s",
                   std::nullopt, true);
        report.Add(fmt::format("turn{}_ttft_p99{}", turn + 1, suffix), run->ttft[turn][1], "s",
                   std::nullopt, true);
      }
      report.Add("itl_p99" + suffix, run->itl_p99, "s", std::nullopt, true);
      report.Add("decode_tok_s" + suffix, run->decode_tok_s, "tok/s");
      by_policy[policies[pi]] = *run;
    }
    // Side by side with none's run of the same frame count.
    auto none = by_policy.find("none");
    if (none == by_policy.end() || none->second.resident == 0) continue;
    for (const auto& [policy, run] : by_policy) {
      if (policy == "none") continue;
      const std::string suffix = fmt::format("_{}_over_none_f{}", Label(policy), frames);
      report.Add("sessions" + suffix, static_cast<double>(run.resident) / none->second.resident,
                 "x", 3.0);
      if (none->second.ttft[1][1] > 0) {
        report.Add("turn2_ttft_p99" + suffix, run.ttft[1][1] / none->second.ttft[1][1], "x", 1.0,
                   true);
      }
    }
  }
  if (json) std::printf("%s\n", report.Json().c_str());
  return 0;
}

}  // namespace framezip::cli
