// Starts the real framezip-server on 127.0.0.1:0 and checks the process contract: it serves
// grpc.health.v1, and SIGTERM drains it to exit code 0; and its binary loads no decoder library.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "engine/core/device.h"
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

std::string ReadLog(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST_CASE("framezip-server --device cuda without a usable GPU fails at start, saying why",
          "[integration][server]") {
  testing::TempDir dir;
  auto server = testing::ChildProcess::Start(
      {(testing::BinaryDir() / "bin" / "framezip-server").string(), "--model",
       (testing::SourceDir() / "models/framezip-tiny-video").string(), "--device", "cuda",
       "--listen", "127.0.0.1:0", "--metrics-listen", ""},
      dir / "server.log");
  REQUIRE(server);
  const auto code = server->Wait(60s);
  REQUIRE(code.has_value());
  CHECK(*code == 1);  // a start-up error, not a crash (128 + signal)
  const std::string log = ReadLog(dir / "server.log");
  INFO(log);
  CHECK_THAT(log, Catch::Contains("--device cuda"));
  // The reason names what is missing: the build's CUDA backend, or a GPU the build could use.
  if (!engine::BuiltWithCuda()) {
    CHECK_THAT(log, Catch::Contains("built without CUDA"));
  } else if (engine::CudaDeviceCount() == 0) {
    CHECK_THAT(log, Catch::Contains("no GPU"));
  }
  // A device name that is none at all is a usage error.
  auto bad = testing::ChildProcess::Start(
      {(testing::BinaryDir() / "bin" / "framezip-server").string(), "--device", "gpu0"},
      dir / "bad.log");
  REQUIRE(bad);
  const auto bad_code = bad->Wait(20s);
  REQUIRE(bad_code.has_value());
  CHECK(*bad_code == 2);
  CHECK_THAT(ReadLog(dir / "bad.log"), Catch::Contains("--device: 'gpu0'"));
}

// The shared libraries the dynamic loader maps for `binary` (ldd: the whole closure, not only its
// own NEEDED entries), as ldd prints them.
std::string SharedLibraries(const std::filesystem::path& binary, const std::filesystem::path& log) {
  REQUIRE(testing::RunCommand({"ldd", binary.string()}, log) == 0);
  return ReadLog(log);
}

TEST_CASE("framezip-server links no FFmpeg or OpenCV: decoding is the media worker's",
          "[integration][server]") {
  testing::TempDir dir;
  const std::string server =
      SharedLibraries(testing::BinaryDir() / "bin" / "framezip-server", dir / "server.ldd");
  INFO("ldd framezip-server:\n" << server);
  for (const char* library :
       {"libavformat", "libavcodec", "libavutil", "libswscale", "libswresample", "libopencv_"}) {
    CHECK_THAT(server, !Catch::Contains(library));
  }
  // The check sees these libraries where they are: the worker decodes, so it links them.
  const std::string worker =
      SharedLibraries(testing::BinaryDir() / "bin" / "framezip-media-worker", dir / "worker.ldd");
  CHECK_THAT(worker, Catch::Contains("libavformat") && Catch::Contains("libavcodec") &&
                         Catch::Contains("libswscale") && Catch::Contains("libopencv_imgcodecs"));
}

}  // namespace
}  // namespace framezip
