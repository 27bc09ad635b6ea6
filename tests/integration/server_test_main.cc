// framezip-test-server: framezip-server's exact process (server/server_main.h) over the
// deterministic fake model — a TEST DOUBLE for process-level tests (SIGTERM drain, the Python
// client example). Built only with the tests; never installed or shipped.
//
// FRAMEZIP_FAKE_STEP_DELAY_MS sets the fake's time per engine step (default 0).
#include <cstdlib>
#include <filesystem>

#include "server/batch_scheduler.h"
#include "server/server_main.h"
#include "tests/integration/server_fake_model_backend.h"

int main(int argc, char** argv) {
  // This binary lives in build/tests/; the media worker in build/bin/ (flags and the environment
  // still override).
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto worker = self.parent_path().parent_path() / "bin" / "framezip-media-worker";
  setenv("FRAMEZIP_MEDIA_WORKER", worker.c_str(), /*overwrite=*/0);
  auto factory = [](const framezip::server::ServerConfig& config,
                    std::shared_ptr<framezip::media::MediaBackend> /*media: the fake decodes none*/)
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
    scheduler.max_running_per_principal =
        static_cast<uint32_t>(config.max_running_per_principal);
    scheduler.max_queued_tokens_per_principal =
        static_cast<uint64_t>(config.max_queued_tokens_per_principal);
    return std::unique_ptr<framezip::server::TurnEngine>(
        std::make_unique<framezip::server::BatchScheduler>(
            std::make_unique<framezip::testing::FakeModelBackend>(model), scheduler));
  };
  return framezip::server::RunServerMain(argc, argv, factory, "framezip-test-server");
}
