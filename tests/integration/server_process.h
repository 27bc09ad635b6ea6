// A framezip-server process (the shipped binary) on 127.0.0.1:0 serving the shipped model
// (models/framezip-tiny-video), with /metrics on 127.0.0.1:0, for the multi-process integration
// tests (replicas sharing sessions, a KV store lost and restarted).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framezip/v1/video_chat.grpc.pb.h"
#include "tests/testing/child_process.h"

namespace framezip::testing {

class ServerProcess {
 public:
  // Starts the server with `args` after the defaults and waits (60 s at most) for its port;
  // its log is `dir`/`name`.log.
  ServerProcess(const std::filesystem::path& dir, const std::string& name,
                std::vector<std::string> args);
  std::unique_ptr<v1::VideoChat::Stub> Stub() const;
  // SIGTERM (a drain) and wait up to `timeout`; the exit code, nullopt on timeout.
  std::optional<int> Stop(std::chrono::milliseconds timeout);
  int metrics_port() const { return metrics_port_; }
  // The OpenAI-compatible API's port: 0 unless `args` gave --openai-port-file.
  int openai_port() const { return openai_port_; }
  std::string Log() const { return Log(log_); }
  static std::string Log(const std::filesystem::path& path);

 private:
  std::unique_ptr<ChildProcess> child_;
  std::filesystem::path log_;
  std::string address_;
  int metrics_port_ = 0;
  int openai_port_ = 0;
};

}  // namespace framezip::testing
