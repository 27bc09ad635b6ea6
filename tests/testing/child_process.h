// Starts a program (a framezip daemon, redis-server, ffmpeg) for a test and makes sure it is gone
// when the test ends, pass or fail.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace framezip::testing {

class ChildProcess {
 public:
  // argv[0] is the program (a path, or a name looked up in PATH). stdout/stderr go to `log_file`
  // when given, else are inherited.
  static std::optional<ChildProcess> Start(const std::vector<std::string>& argv,
                                           const std::filesystem::path& log_file = {});
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ~ChildProcess();  // SIGKILL and reap if still running

  pid_t pid() const { return pid_; }
  bool Signal(int sig) const;
  // Waits for exit; returns the exit code (128 + signal when killed), nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// Runs a command to completion (for ffmpeg in media tests); returns its exit code.
int RunCommand(const std::vector<std::string>& argv, const std::filesystem::path& log_file = {});

// Polls `path` until it exists with non-empty content, up to `timeout`; returns its content.
std::optional<std::string> WaitForFile(const std::filesystem::path& path,
                                       std::chrono::milliseconds timeout);

}  // namespace framezip::testing
