// framezip bench SUITE [flags]: dispatches to one benchmark suite. Each suite prints readable
// lines and, with --json, one JSON object as the last line (tools/bench/bench_report.h).
#include <cstdio>
#include <cstring>

#include "tools/framezip/subcommands.h"

namespace framezip::cli {
namespace {

struct Suite {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

constexpr Suite kSuites[] = {
    {"engine", "CPU engine: GEMM/bandwidth limits, prefill and decode tok/s, vision ms/frame",
     RunBenchEngine},
    {"attention",
     "a policy (zipvl, dynamic_llava, ...) vs dense on the tiny video model: prefill speedup at "
     "2k/8k/16k, kept ratios, decode tok/s, KV bytes",
     RunBenchAttention},
    {"pruning",
     "Dynamic-LLaVA vs dense prefill on a Qwen2-0.5B-shaped decoder with predictors of the "
     "shipped architecture (random weights)",
     RunBenchPruning},
    {"media", "media: sample 32 frames from 1-min vs 30-min 720p, decode fps, peak RSS",
     RunBenchMedia},
    {"kvstore", "KV store: put/get MiB/s and p50/p99 per tier, embedded and over gRPC",
     RunBenchKvstore},
    {"server", "gRPC serving: TTFT/ITL p50/p99 at concurrency 1/4/16, decode tok/s, turn 2/1 TTFT",
     RunBenchServer},
    {"sessions",
     "sessions one KV budget holds per policy (none, kivi, zipvl, attentionpack, dynamic_llava) "
     "at a fixed arrival rate, 64/256-frame videos: resident count, turn-1/2 TTFT, ITL, tok/s",
     RunBenchSessions},
    {"gpu",
     "GPU (CUDA builds): copy/GEMM ceilings, dense vs ZipVL sparse prefill attention at "
     "4k/16k/32k, paged decode over f16 vs int4/int2 KV at 32k",
     RunBenchGpu},
};

void PrintSuites(FILE* out) {
  std::fprintf(
      out, "usage: framezip bench <suite> [--json] [flags]   (framezip bench <suite> --help)\n\n");
  for (const Suite& s : kSuites) std::fprintf(out, "  %-10s %s\n", s.name, s.summary);
}

}  // namespace

int RunBench(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    PrintSuites(args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  for (const Suite& s : kSuites) {
    if (args[0] == s.name) return s.run(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::fprintf(stderr, "framezip bench: unknown suite '%s'\n\n", args[0].c_str());
  PrintSuites(stderr);
  return 2;
}

}  // namespace framezip::cli
