// framezip bench server: the serving benchmark, as a client of a running framezip-server.
// For each concurrency (default 1, 4, 16) that many sessions each upload the video (optional)
// and ask two questions; reports TTFT and inter-token latency p50/p99 as the client sees them,
// the aggregate decode tokens/s, and turn 2's TTFT over turn 1's (the KV reuse across turns).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "framezip/v1/video_chat.grpc.pb.h"
#include "tools/bench/bench_report.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/subcommands.h"

namespace framezip::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

struct Samples {
  std::mutex mu;
  std::vector<double> ttft[2];  // client-side, per turn number
  std::vector<double> server_ttft[2];
  std::vector<double> itl;
  uint64_t generated = 0;
  int failures = 0;
  std::string first_error;
};

// One session: optional upload, then two turns. Records into `samples`.
void RunSession(v1::VideoChat::Stub& stub, const std::string& video, int max_tokens,
                Samples& samples) {
  auto fail = [&](const grpc::Status& s) {
    std::lock_guard lock(samples.mu);
    ++samples.failures;
    if (samples.first_error.empty()) samples.first_error = s.error_message();
  };
  v1::Session session;
  {
    grpc::ClientContext context;
    if (grpc::Status s = stub.CreateSession(&context, {}, &session); !s.ok()) return fail(s);
  }
  if (!video.empty()) {
    grpc::ClientContext context;
    v1::Media media;
    auto writer = stub.UploadMedia(&context, &media);
    v1::UploadMediaRequest first;
    first.mutable_metadata()->set_session_id(session.session_id());
    first.mutable_metadata()->set_name("bench.mp4");
    first.mutable_metadata()->set_declared_size_bytes(video.size());
    writer->Write(first);
    for (size_t off = 0; off < video.size(); off += 1 << 20) {
      v1::UploadMediaRequest chunk;
      chunk.set_chunk(video.substr(off, 1 << 20));
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    if (grpc::Status s = writer->Finish(); !s.ok()) return fail(s);
  }
  const char* questions[2] = {"What happens in the video?", "What happens after that?"};
  for (int turn = 0; turn < 2; ++turn) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    v1::ChatRequest request;
    request.set_session_id(session.session_id());
    request.set_text(questions[turn]);
    request.mutable_sampling()->set_max_tokens(static_cast<uint32_t>(max_tokens));
    const auto start = SteadyClock::now();
    auto reader = stub.Chat(&context, request);
    v1::ChatResponse response;
    std::vector<double> gaps;
    double ttft = -1;
    auto last = start;
    v1::TurnStats stats;
    while (reader->Read(&response)) {
      const auto now = SteadyClock::now();
      if (response.has_delta()) {
        if (ttft < 0) {
          ttft = std::chrono::duration<double>(now - start).count();
        } else {
          gaps.push_back(std::chrono::duration<double>(now - last).count());
        }
        last = now;
      } else if (response.has_stats()) {
        stats = response.stats();
      }
    }
    if (grpc::Status s = reader->Finish(); !s.ok()) return fail(s);
    std::lock_guard lock(samples.mu);
    if (ttft >= 0) samples.ttft[turn].push_back(ttft);
    samples.server_ttft[turn].push_back(stats.time_to_first_token_seconds());
    samples.itl.insert(samples.itl.end(), gaps.begin(), gaps.end());
    samples.generated += stats.generated_tokens();
  }
  grpc::ClientContext context;
  v1::DeleteSessionRequest del;
  del.set_session_id(session.session_id());
  v1::DeleteSessionResponse deleted;
  stub.DeleteSession(&context, del, &deleted);
}

}  // namespace

int RunBenchServer(const std::vector<std::string>& args) {
  std::string server;
  std::string video_path;
  std::string levels = "1,4,16";
  int max_tokens = 32;
  bool json = false;
  FlagSet flags("framezip bench server",
                "Serving benchmark against a running framezip-server: TTFT/ITL p50/p99 per "
                "concurrency, aggregate decode tok/s, turn-2/turn-1 TTFT.");
  flags.String("server", &server, "address of a running framezip-server (required)", "ADDR");
  flags.String("video", &video_path, "video each session uploads before its turns", "FILE");
  flags.String("concurrency", &levels, "comma-separated concurrency levels", "LIST");
  flags.Int("max-tokens", &max_tokens, "tokens generated per turn at most");
  flags.Bool("json", &json, "print one JSON object as the last line");
  if (auto code = ParseOrExit(flags, args)) return *code;
  if (server.empty()) {
    std::fprintf(stderr, "framezip bench server: --server is required (start framezip-server "
                         "with --model first)\n");
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

  auto channel = grpc::CreateChannel(server, grpc::InsecureChannelCredentials());
  auto stub = v1::VideoChat::NewStub(channel);
  bench::Machine machine = bench::DetectMachine();
  machine.threads = static_cast<int>(std::thread::hardware_concurrency());
  bench::Report report("server", machine);
  double ratio = 0;
  for (int c : concurrency) {
    Samples samples;
    const auto start = SteadyClock::now();
    std::vector<std::thread> threads;
    for (int i = 0; i < c; ++i) {
      threads.emplace_back([&] { RunSession(*stub, video, max_tokens, samples); });
    }
    for (auto& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
    if (samples.failures > 0) {
      std::fprintf(stderr, "framezip bench server: %d of %d sessions failed: %s\n",
                   samples.failures, c, samples.first_error.c_str());
      return 1;
    }
    std::vector<double> ttft = samples.ttft[0];
    ttft.insert(ttft.end(), samples.ttft[1].begin(), samples.ttft[1].end());
    report.Add(fmt::format("ttft_p50_c{}", c), Percentile(ttft, 0.5), "s", std::nullopt, true);
    report.Add(fmt::format("ttft_p99_c{}", c), Percentile(ttft, 0.99), "s", std::nullopt, true);
    report.Add(fmt::format("itl_p50_c{}", c), Percentile(samples.itl, 0.5), "s", std::nullopt,
               true);
    report.Add(fmt::format("itl_p99_c{}", c), Percentile(samples.itl, 0.99), "s", std::nullopt,
               true);
    report.Add(fmt::format("decode_tok_s_c{}", c),
               seconds > 0 ? static_cast<double>(samples.generated) / seconds : 0, "tok/s");
    if (ratio == 0) {
      const double t1 = Percentile(samples.server_ttft[0], 0.5);
      const double t2 = Percentile(samples.server_ttft[1], 0.5);
      ratio = t1 > 0 ? t2 / t1 : 0;
    }
  }
  // Server-measured TTFT of turn 2 over turn 1 at the first concurrency level: below 1 when the
  // follow-up reuses the session's KV instead of re-reading the video.
  report.Add("turn2_over_turn1_ttft", ratio, "ratio", std::nullopt, true);
  if (json) std::printf("%s\n", report.Json().c_str());
  return 0;
}

}  // namespace framezip::cli
