// The official `openai` Python client (pinned in tests/integration/openai_client/requirements.txt,
// installed by this test into a venv of the build directory) against a real server process
// (framezip-test-server: framezip-server's process over the test-double model) with
// --openai-listen: a video question and a three-turn conversation resent in full, plain and
// streamed, whose answers must equal those of a gRPC session holding the same conversation, and
// whose turns 2 and 3 report >= 90% of their prompt as cached (stateless KV reuse).
// When PyPI cannot be reached (and the venv was not made before) it prints "SKIPPED: ..." with
// pip's reason, and CTest reports the test as skipped; any other pip failure fails the test.
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

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// pip's words for "the index cannot be reached" (no network, no DNS, a proxy refusing).
bool PypiUnreachable(const std::string& pip_log) {
  for (const char* sign :
       {"NewConnectionError", "Network is unreachable", "Temporary failure in name resolution",
        "Name or service not known", "ConnectTimeoutError", "ProxyError", "Connection refused",
        "No matching distribution found"}) {
    if (pip_log.find(sign) != std::string::npos) return true;
  }
  return false;
}

TEST_CASE("the official openai client chats with the real server over HTTP",
          "[integration][server][openai]") {
  TempDir dir;
  const auto requirements = SourceDir() / "tests/integration/openai_client/requirements.txt";
  const auto venv = BinaryDir() / "openai-client-venv";
  const std::string python = (venv / "bin" / "python").string();
  // The venv is kept between runs; it is (re)made when it lacks the pinned client.
  const std::string probe = "import openai, sys; sys.exit(0 if openai.__version__ == '" + [&] {
    const std::string text = ReadText(requirements);
    const size_t at = text.find("openai==");
    return text.substr(at + 8, text.find('\n', at) - at - 8);
  }() + "' else 1)";
  if (!std::filesystem::exists(python) ||
      RunCommand({python, "-c", probe}, dir / "probe.log") != 0) {
    std::filesystem::remove_all(venv);
    REQUIRE(RunCommand({"/usr/bin/python3", "-m", "venv", venv.string()}, dir / "venv.log") == 0);
    const int pip =
        RunCommand({(venv / "bin" / "pip").string(), "install", "--quiet",
                    "--disable-pip-version-check", "--timeout", "30", "-r", requirements.string()},
                   dir / "pip.log");
    if (pip != 0) {
      const std::string log = ReadText(dir / "pip.log");
      std::filesystem::remove_all(venv);
      if (PypiUnreachable(log)) {
        std::cout << "SKIPPED: PyPI is unreachable, so the pinned openai client could not be "
                     "installed. pip said: "
                  << log.substr(0, 400) << std::endl;
        return;
      }
      FAIL("pip install -r " << requirements.string() << " failed:\n" << log);
    }
  }

  auto server = ChildProcess::Start(
      {(BinaryDir() / "tests" / "framezip-test-server").string(), "--listen", "127.0.0.1:0",
       "--port-file", (dir / "port").string(), "--metrics-listen", "127.0.0.1:0", "--openai-listen",
       "127.0.0.1:0", "--openai-port-file", (dir / "openai-port").string()},
      dir / "server.log");
  REQUIRE(server);
  const auto port = WaitForFile(dir / "port", 20s);
  const auto http_port = WaitForFile(dir / "openai-port", 20s);
  REQUIRE(port);
  REQUIRE(http_port);
  const std::string address = "127.0.0.1:" + port->substr(0, port->find('\n'));
  const std::string base_url =
      "http:/"
      "/127.0.0.1:" +
      http_port->substr(0, http_port->find('\n')) + "/v1";
  const std::string clip = MakeTestClip(dir.path());
  // The fake answers by repeating the question: a long first question makes the history most of
  // each later prompt, as a video's visual tokens do with a real model.
  const std::vector<std::string> questions = {
      "What moves in this video, and where does it go from the start to the end of the clip?",
      "Which colour is it?", "And at the end?"};

  // The same conversation as a gRPC session: its answers and prompt sizes are the reference.
  ChatClient grpc_client(
      v1::VideoChat::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
  const std::string session = grpc_client.NewSession();
  v1::Media media;
  REQUIRE(grpc_client.Upload(session, clip, &media).ok());
  std::vector<TurnResult> reference;
  for (const std::string& q : questions) {
    reference.push_back(grpc_client.Ask(session, q));
    REQUIRE(reference.back().status.ok());
    REQUIRE(reference.back().stats);
  }

  std::vector<std::string> argv = {
      python, (SourceDir() / "tests/integration/openai_client/check_openai_client.py").string(),
      base_url, "fake-test-model", (dir / "clip.mp4").string()};
  argv.insert(argv.end(), questions.begin(), questions.end());
  const int code = RunCommand(argv, dir / "client.log");
  const std::string log = ReadText(dir / "client.log");
  INFO("client output:\n" << log << "\nserver log:\n" << ReadText(dir / "server.log"));
  REQUIRE(code == 0);
  const std::string last = log.substr(log.rfind("{\"plain\""));
  const auto result = nlohmann::json::parse(last.substr(0, last.find('\n')));
  for (const char* mode : {"plain", "stream"}) {
    INFO(mode);
    REQUIRE(result[mode].size() == questions.size());
    for (size_t i = 0; i < questions.size(); ++i) {
      const auto& turn = result[mode][i];
      CHECK(turn["answer"] == reference[i].text);
      CHECK(turn["finish_reason"] == "stop");
      CHECK(turn["prompt_tokens"].get<uint32_t>() == reference[i].stats->prompt_tokens());
      // Turns 2 and 3 extend the conversation whose KV the server kept: only the new turn is
      // prefilled.
      CHECK(turn["cached_tokens"].get<uint32_t>() == reference[i].stats->cached_tokens());
      if (i > 0) {
        CHECK(turn["cached_tokens"].get<uint32_t>() >=
              turn["prompt_tokens"].get<uint32_t>() * 9 / 10);
      }
    }
  }
  CHECK_THAT(result["n3_error"].get<std::string>(), Catch::Contains("only n = 1"));

  REQUIRE(server->Signal(SIGTERM));
  const auto exit_code = server->Wait(20s);
  REQUIRE(exit_code.has_value());
  CHECK(*exit_code == 0);
}

}  // namespace
}  // namespace framezip::testing
