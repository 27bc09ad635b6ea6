// Processes and probes for the kvstore integration tests: a real redis-server on a free loopback
// port (no persistence), a real framezip-kvstore, and a tiny HTTP GET for /metrics. Every wait
// is a bounded condition wait, never a fixed sleep.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/testing/child_process.h"

namespace framezip::kvstore::test {

// A port that was free on 127.0.0.1 a moment ago.
int FreeLoopbackPort();

// True when something answers PING on 127.0.0.1:port.
bool RedisPing(int port);

class RedisServer {
 public:
  // Starts redis-server on 127.0.0.1:`port` (0 = a free port) and waits until it answers.
  explicit RedisServer(const std::filesystem::path& dir, int port = 0);
  bool running() const { return child_ != nullptr; }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // SIGKILL and reap (Redis "down"); Start() brings it back on the same port, empty.
  void Kill();
  bool Start();
  // Runs one command (argv) and returns the reply as text ("(nil)" for nil), for tests.
  std::string Command(const std::vector<std::string>& argv) const;

 private:
  std::filesystem::path dir_;
  int port_;
  std::unique_ptr<testing::ChildProcess> child_;
};

class KvstoreDaemon {
 public:
  // Starts build/bin/framezip-kvstore on 127.0.0.1:`port` (0 = a free one; a restart passes the
  // port it had) and metrics on 127.0.0.1:0 with `args`, and waits for it to serve.
  KvstoreDaemon(const std::filesystem::path& dir, std::vector<std::string> args, int port = 0);
  int port() const { return port_; }
  bool running() const { return child_ != nullptr && port_ > 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int metrics_port() const { return metrics_port_; }
  testing::ChildProcess& process() { return *child_; }
  // SIGKILL and reap.
  void Kill();
  // SIGTERM; returns the exit code.
  std::optional<int> Stop();
  std::string Log() const;

 private:
  std::filesystem::path dir_;
  std::unique_ptr<testing::ChildProcess> child_;
  int port_ = 0;
  int metrics_port_ = 0;
};

// The body of http://127.0.0.1:port/path, or "" on failure.
std::string HttpGet(int port, const std::string& path);

// The value of the first /metrics sample line that starts with `prefix` (name{labels}), or
// nullopt.
std::optional<double> MetricValue(const std::string& metrics, const std::string& prefix);

}  // namespace framezip::kvstore::test
