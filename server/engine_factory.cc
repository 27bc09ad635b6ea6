#include "server/engine_factory.h"

#include "engine/core/device.h"
#include "server/batch_scheduler.h"
#include "server/engine_backend.h"
#include "server/unavailable_engine.h"

namespace framezip::server {

StatusOr<std::unique_ptr<TurnEngine>> CreateEngine(const ServerConfig& config,
                                                   std::shared_ptr<media::MediaBackend> media) {
  if (config.model_dir.empty()) {
    return std::unique_ptr<TurnEngine>(std::make_unique<UnavailableEngine>(
        "the server was started without --model; sessions and uploads work, turns do not"));
  }
  FZ_ASSIGN_OR_RETURN(const engine::Device device, engine::ParseDevice(config.device));
  if (!device.is_cpu()) {
    // A machine without the GPU it was asked for: say so at start (not a crash later).
    if (Status usable = engine::CheckDeviceUsable(device); !usable.ok()) {
      return Annotate(usable, fmt::format("--device {}", config.device));
    }
  }
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<EngineBackend> backend,
                      EngineBackend::Load(config, std::move(media)));
  SchedulerOptions options;
  options.max_running = static_cast<uint32_t>(config.max_running);
  options.max_waiting = static_cast<uint32_t>(config.max_waiting);
  options.step_token_budget = static_cast<uint32_t>(config.step_token_budget);
  options.prefill_chunk_tokens = static_cast<uint32_t>(config.prefill_chunk_tokens);
  options.prepare_threads = config.prepare_threads;
  options.max_running_per_principal = static_cast<uint32_t>(config.max_running_per_principal);
  options.max_queued_tokens_per_principal =
      static_cast<uint64_t>(config.max_queued_tokens_per_principal);
  return std::unique_ptr<TurnEngine>(
      std::make_unique<BatchScheduler>(std::move(backend), options));
}

}  // namespace framezip::server
