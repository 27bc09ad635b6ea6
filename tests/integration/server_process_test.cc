// Starts the real framezip-server on 127.0.0.1:0 and checks the process contract: it serves
// grpc.health.v1, and SIGTERM drains it to exit code 0.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <catch2/catch.hpp>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace framezip {
namespace {

using namespace std::chrono_literals;

std::string HealthOf(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 5s);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return "error: " + status.error_message();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

TEST_CASE("framezip-server serves health and drains on SIGTERM", "[integration][server]") {
  testing::TempDir dir;
  const auto port_file = dir / "port";
  auto server = testing::ChildProcess::Start(
      {(testing::BinaryDir() / "bin" / "framezip-server").string(), "--listen", "127.0.0.1:0",
       "--port-file", port_file.string(), "--grace-seconds", "5", "--metrics-listen",
       "127.0.0.1:0"},
      dir / "server.log");
  REQUIRE(server);
  const auto port = testing::WaitForFile(port_file, 20s);
  REQUIRE(port);
  const std::string address = "127.0.0.1:" + port->substr(0, port->size() - 1);
  CHECK(HealthOf(address) == "SERVING");

  REQUIRE(server->Signal(SIGTERM));
  const auto code = server->Wait(20s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
}

TEST_CASE("framezip-server refuses unknown flags with a usage error", "[integration][server]") {
  testing::TempDir dir;
  auto server = testing::ChildProcess::Start(
      {(testing::BinaryDir() / "bin" / "framezip-server").string(), "--no-such-flag"},
      dir / "server.log");
  REQUIRE(server);
  const auto code = server->Wait(20s);
  REQUIRE(code.has_value());
  CHECK(*code == 2);
}

}  // namespace
}  // namespace framezip
