#include "tests/integration/server_process.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "tests/testing/temp_dir.h"

namespace framezip::testing {

using namespace std::chrono_literals;

ServerProcess::ServerProcess(const std::filesystem::path& dir, const std::string& name,
                             std::vector<std::string> args)
    : log_(dir / (name + ".log")) {
  const auto port_file = dir / (name + ".port");
  const auto metrics_file = dir / (name + ".metrics-port");
  std::vector<std::string> argv = {(BinaryDir() / "bin/framezip-server").string(),
                                   "--model",
                                   (SourceDir() / "models/framezip-tiny-video").string(),
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--port-file",
                                   port_file.string(),
                                   "--metrics-listen",
                                   "127.0.0.1:0",
                                   "--metrics-port-file",
                                   metrics_file.string(),
                                   "--grace-seconds",
                                   "2"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto child = ChildProcess::Start(argv, log_);
  REQUIRE(child);
  child_ = std::make_unique<ChildProcess>(std::move(*child));
  const auto port = WaitForFile(port_file, 60s);
  INFO("server log: " << Log());
  REQUIRE(port);
  address_ = "127.0.0.1:" + port->substr(0, port->find('\n'));
  if (const auto metrics = WaitForFile(metrics_file, 10s)) metrics_port_ = std::stoi(*metrics);
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] != "--openai-port-file") continue;
    const auto http = WaitForFile(args[i + 1], 10s);
    REQUIRE(http);
    openai_port_ = std::stoi(*http);
  }
}

std::unique_ptr<v1::VideoChat::Stub> ServerProcess::Stub() const {
  return v1::VideoChat::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
}

std::optional<int> ServerProcess::Stop(std::chrono::milliseconds timeout) {
  child_->Signal(SIGTERM);
  return child_->Wait(timeout);
}

std::string ServerProcess::Log(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace framezip::testing
