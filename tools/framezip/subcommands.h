// Entry points of the framezip CLI's subcommands. Each takes the arguments after its name and
// returns the process exit code (0 ok, 1 failure, 2 usage error).
#pragma once

#include <string>
#include <vector>

namespace framezip::cli {

int RunVersion(const std::vector<std::string>& args);
int RunDevices(const std::vector<std::string>& args);
int RunHealth(const std::vector<std::string>& args);
int RunRun(const std::vector<std::string>& args);
int RunBench(const std::vector<std::string>& args);
int RunBenchEngine(const std::vector<std::string>& args);
int RunBenchAttention(const std::vector<std::string>& args);
int RunBenchPruning(const std::vector<std::string>& args);
int RunBenchMedia(const std::vector<std::string>& args);
int RunBenchKvstore(const std::vector<std::string>& args);
int RunBenchServer(const std::vector<std::string>& args);
int RunBenchSessions(const std::vector<std::string>& args);
int RunBenchGpu(const std::vector<std::string>& args);
int RunChat(const std::vector<std::string>& args);
int RunEval(const std::vector<std::string>& args);

// Parses flags for a subcommand; prints help (returns 0) or the error (returns 2) and sets
// `done` when the subcommand should exit now.
}  // namespace framezip::cli
