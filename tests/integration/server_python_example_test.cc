// The Python client example (examples/python/chat_client.py) against a real server process
// (framezip-test-server: framezip-server's process over the test-double model): a video, then
// decoded RGB24 frames (ffmpeg's rawvideo output) uploaded without a container. Runs on the
// project's .venv when it has grpcio and grpcio-tools, else on Debian's python3 with python3-grpcio
// (scripts/install-deps.sh installs it; the stubs then come from protoc + grpc_python_plugin);
// with neither it prints "SKIPPED: ..." and CTest reports the test as skipped, not passed.
#include <signal.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/integration/server_test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace framezip::testing {
namespace {

using namespace std::chrono_literals;

TEST_CASE("the Python client example chats with the real server", "[integration][server]") {
  TempDir dir;
  const std::string venv_python = (SourceDir() / ".venv" / "bin" / "python").string();
  std::string python;
  if (std::filesystem::exists(venv_python) &&
      RunCommand({venv_python, "-c", "import grpc, grpc_tools"}, dir / "probe.log") == 0) {
    python = venv_python;
  } else if (RunCommand({"/usr/bin/python3", "-c", "import grpc, google.protobuf"},
                        dir / "probe.log") == 0) {
    python = "/usr/bin/python3";
  } else {
    std::cout << "SKIPPED: neither " << venv_python
              << " with grpcio + grpcio-tools nor /usr/bin/python3 with python3-grpcio is "
                 "available (scripts/install-deps.sh installs the latter)"
              << std::endl;
    return;
  }
  auto server = ChildProcess::Start(
      {(BinaryDir() / "tests" / "framezip-test-server").string(), "--listen", "127.0.0.1:0",
       "--port-file", (dir / "port").string(), "--metrics-listen", "127.0.0.1:0"},
      dir / "server.log");
  REQUIRE(server);
  const auto port = WaitForFile(dir / "port", 20s);
  REQUIRE(port);
  const std::string address = "127.0.0.1:" + port->substr(0, port->find('\n'));
  MakeTestClip(dir.path());

  const int code = RunCommand(
      {python, (SourceDir() / "examples" / "python" / "chat_client.py").string(), "--server",
       address, "--video", (dir / "clip.mp4").string(), "--question", "What moves?",
       "--question", "And then?", "--quiet"},
      dir / "client.log");
  std::ifstream in(dir / "client.log");
  std::string line;
  std::string last;
  std::string all;
  while (std::getline(in, line)) {
    all += line + "\n";
    if (line.rfind("{\"session_id\"", 0) == 0) last = line;
  }
  INFO("client output:\n" << all);
  REQUIRE(code == 0);
  REQUIRE_FALSE(last.empty());
  const auto summary = nlohmann::json::parse(last);
  REQUIRE(summary["turns"].size() == 2);
  CHECK(summary["turns"][0]["answer"].get<std::string>().rfind("You said 'What moves?'", 0) == 0);
  CHECK(summary["turns"][0]["cached_tokens"].get<int>() == 0);
  CHECK(summary["turns"][1]["cached_tokens"].get<int>() > 0);

  // Decoded RGB24 frames, as ffmpeg writes them, uploaded without a container.
  REQUIRE(RunCommand({"ffmpeg", "-loglevel", "error", "-y", "-i", (dir / "clip.mp4").string(), "-f",
                      "rawvideo", "-pix_fmt", "rgb24", (dir / "frames.rgb").string()},
                     dir / "ffmpeg.log") == 0);
  const int raw_code =
      RunCommand({python, (SourceDir() / "examples" / "python" / "chat_client.py").string(),
                  "--server", address, "--raw-frames", (dir / "frames.rgb").string(), "--width",
                  "64", "--height", "48", "--fps", "10", "--question", "What moves?", "--quiet"},
                 dir / "raw_client.log");
  std::ifstream raw_in(dir / "raw_client.log");
  std::string media_line;
  std::string raw_last;
  std::string raw_all;
  while (std::getline(raw_in, line)) {
    raw_all += line + "\n";
    if (line.rfind("{\"media_id\"", 0) == 0) media_line = line;
    if (line.rfind("{\"session_id\"", 0) == 0) raw_last = line;
  }
  INFO("raw-frames client output:\n" << raw_all);
  REQUIRE(raw_code == 0);
  REQUIRE_FALSE(media_line.empty());
  const auto raw_media = nlohmann::json::parse(media_line);
  CHECK(raw_media["mime_type"] == "video/x-raw-rgb24");
  CHECK(raw_media["frames"].get<int>() > 0);
  CHECK(raw_media["duration_s"].get<double>() == Approx(2.0).margin(1e-6));
  REQUIRE_FALSE(raw_last.empty());
  const auto raw_summary = nlohmann::json::parse(raw_last);
  REQUIRE(raw_summary["turns"].size() == 1);
  CHECK(raw_summary["turns"][0]["answer"].get<std::string>().rfind("You said 'What moves?'", 0) ==
        0);

  REQUIRE(server->Signal(SIGTERM));
  const auto exit_code = server->Wait(20s);
  REQUIRE(exit_code.has_value());
  CHECK(*exit_code == 0);
}

}  // namespace
}  // namespace framezip::testing
