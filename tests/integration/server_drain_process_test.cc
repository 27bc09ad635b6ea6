// framezip-server's process contract with a turn in flight, on the test-double model
// (framezip-test-server runs server/server_main.cc, the same code as framezip-server): SIGTERM
// turns health NOT_SERVING, refuses new turns, lets the running turn finish, exits 0.
#include <signal.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <thread>

#include "tests/integration/server_test_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/temp_dir.h"

namespace framezip::testing {
namespace {

using namespace std::chrono_literals;

TEST_CASE("SIGTERM drains a server with a turn in flight and exits 0",
          "[integration][server]") {
  TempDir dir;
  setenv("FRAMEZIP_FAKE_STEP_DELAY_MS", "10", 1);
  auto server = ChildProcess::Start(
      {(BinaryDir() / "tests" / "framezip-test-server").string(), "--listen", "127.0.0.1:0",
       "--port-file", (dir / "port").string(), "--metrics-listen", "127.0.0.1:0",
       "--grace-seconds", "20", "--log-format", "json"},
      dir / "server.log");
  unsetenv("FRAMEZIP_FAKE_STEP_DELAY_MS");
  REQUIRE(server);
  const auto port = WaitForFile(dir / "port", 20s);
  REQUIRE(port);
  const std::string address = "127.0.0.1:" + port->substr(0, port->find('\n'));
  ChatClient client(
      v1::VideoChat::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
  const std::string id = client.NewSession();
  const std::string other = client.NewSession();

  TurnResult refused;
  v1::ChatRequest request;
  request.set_session_id(id);
  request.set_text("a turn that is running when SIGTERM comes");
  const TurnResult running = client.Chat(request, [&](grpc::ClientContext&, int index) {
    if (index != 0) return;
    REQUIRE(server->Signal(SIGTERM));
    // New turns are refused while the running one finishes (by the service while draining, or
    // by the transport once it stops accepting calls: UNAVAILABLE either way).
    REQUIRE(WaitUntil([&] {
      refused = client.Ask(other, "too late");
      return !refused.status.ok();
    }));
  });
  REQUIRE(running.status.error_message() == "");
  CHECK(running.stats);
  CHECK(refused.status.error_code() == grpc::StatusCode::UNAVAILABLE);
  const auto code = server->Wait(30s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
}

}  // namespace
}  // namespace framezip::testing
