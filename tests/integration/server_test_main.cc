// framezip-test-server: framezip-server's exact process (server/server_main.h) over the
// deterministic fake model — a TEST DOUBLE for process-level tests (SIGTERM drain, the Python
// client example). Built only with the tests; never installed or shipped.
//
// FRAMEZIP_FAKE_STEP_DELAY_MS sets the fake's time per engine step (default 0).
#include <cstdlib>

#include "server/batch_scheduler.h"
#include "server/server_main.h"
#include "tests/integration/server_fake_model_backend.h"

int main(int argc, char** argv) {
  auto factory = [](const framezip::server::ServerConfig& config)
      -> framezip::StatusOr<std::unique_ptr<framezip::server::TurnEngine>> {
    framezip::testing::FakeModelOptions model;
    if (const char* ms = std::getenv("FRAMEZIP_FAKE_STEP_DELAY_MS")) {
      model.step_delay = std::chrono::milliseconds(std::atoi(ms));
    }
    framezip::server::SchedulerOptions scheduler;
    scheduler.max_running = static_cast<uint32_t>(config.max_running);
    scheduler.max_waiting = static_cast<uint32_t>(config.max_waiting);
    scheduler.step_token_budget = static_cast<uint32_t>(config.step_token_budget);
    scheduler.prefill_chunk_tokens = static_cast<uint32_t>(config.prefill_chunk_tokens);
    scheduler.prepare_threads = config.prepare_threads;
    return std::unique_ptr<framezip::server::TurnEngine>(
        std::make_unique<framezip::server::BatchScheduler>(
            std::make_unique<framezip::testing::FakeModelBackend>(model), scheduler));
  };
  return framezip::server::RunServerMain(argc, argv, factory, "framezip-test-server");
}
