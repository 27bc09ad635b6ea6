// framezip: the command-line tool. One binary, one subcommand per job (docs/architecture.md §6);
// each subcommand lives in its own file and registers in kSubcommands below.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/ops/blas_core.h"
#include "tools/framezip/subcommands.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

constexpr Subcommand kSubcommands[] = {
    {"version", "print the version and how this binary was built", framezip::cli::RunVersion},
    {"devices", "list the devices the engine can run on", framezip::cli::RunDevices},
    {"health", "ask a running server for its gRPC health", framezip::cli::RunHealth},
    {"run", "run one chat turn in-process on a video or image", framezip::cli::RunRun},
    {"bench", "run a benchmark suite (engine, ...)", framezip::cli::RunBench},
    {"chat", "chat with a running server about a video (interactive)", framezip::cli::RunChat},
    {"eval", "accuracy on a generated video-QA split (synthvid)", framezip::cli::RunEval},
};

void PrintUsage(FILE* out) {
  std::fprintf(out, "usage: framezip <subcommand> [flags]   (framezip <subcommand> --help)\n\n");
  for (const Subcommand& s : kSubcommands) std::fprintf(out, "  %-10s %s\n", s.name, s.summary);
}

}  // namespace

int main(int argc, char** argv) {
  // Before any work: may restart this program once with OpenBLAS on the CPU's fast kernels.
  framezip::engine::ops::cpu::ReexecWithFasterBlasCore(argv);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Subcommand& s : kSubcommands) {
    if (std::strcmp(argv[1], s.name) == 0) {
      std::vector<std::string> args(argv + 2, argv + argc);
      return s.run(args);
    }
  }
  std::fprintf(stderr, "framezip: unknown subcommand '%s'\n\n", argv[1]);
  PrintUsage(stderr);
  return 2;
}
