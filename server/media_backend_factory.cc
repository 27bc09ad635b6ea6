#include "server/media_backend_factory.h"

#include <thread>

#include "media/worker/worker_pool.h"

namespace framezip::server {

std::filesystem::path DefaultMediaWorkerPath() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "framezip-media-worker";
  return self.parent_path() / "framezip-media-worker";
}

StatusOr<std::shared_ptr<media::MediaBackend>> CreateMediaBackend(const ServerConfig& config) {
  media::worker::WorkerPoolOptions options;
  options.worker_binary =
      config.media_worker.empty() ? DefaultMediaWorkerPath() : std::filesystem::path(config.media_worker);
  options.max_workers = config.media_workers;
  options.memory_bytes = static_cast<uint64_t>(config.media_worker_memory_bytes);
  options.cpu_seconds = static_cast<uint32_t>(config.media_worker_cpu_seconds);
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<media::worker::WorkerPool> pool,
                      media::worker::WorkerPool::Start(options));
  return std::shared_ptr<media::MediaBackend>(std::move(pool));
}

}  // namespace framezip::server
