// VideoChatServer: one running framezip server — the gRPC server (VideoChat, grpc.health.v1,
// reflection), its sessions, the engine, metrics on their own port, housekeeping (session TTL,
// gauges) — built from a ServerConfig. framezip-server's main() and the in-process integration
// tests both use it, so tests exercise exactly what ships.
//
// Thread-safe: Drain may be called from any thread, once or more.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "media/media_backend.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/session_store.h"
#include "server/shared_sessions.h"
#include "server/turn_engine.h"

namespace framezip::server {

class VideoChatService;
class OpenAiHttpServer;

class VideoChatServer {
 public:
  // Binds config.listen (and config.metrics_listen unless empty) and starts serving. Errors:
  // INVALID_ARGUMENT (bad auth/TLS files), UNAVAILABLE (cannot listen).
  // `media` validates uploads (server/media_backend_factory.h; shared with the engine).
  static StatusOr<std::unique_ptr<VideoChatServer>> Start(
      const ServerConfig& config, std::unique_ptr<TurnEngine> engine,
      std::shared_ptr<media::MediaBackend> media);
  ~VideoChatServer();  // drains with no grace period when Drain was not called

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }  // 0 when metrics are off
  int openai_port() const { return openai_port_; }    // 0 when the OpenAI API is off
  TurnEngine& engine() { return *engine_; }
  ServerMetrics& metrics() { return *metrics_; }
  const std::filesystem::path& media_dir() const { return media_dir_; }

  // SIGTERM behaviour: health NOT_SERVING; new turns, sessions and uploads get UNAVAILABLE;
  // in-flight turns get `grace` to finish, then are cancelled; session KV is flushed to the
  // store; then the gRPC server shuts down. Blocks until done.
  void Drain(std::chrono::milliseconds grace);

 private:
  VideoChatServer() = default;
  void HousekeepingLoop();
  // Once the engine's device has had a sticky error (engine/core/device_health.h), every check
  // reports NOT_SERVING so the orchestrator restarts the process: its CUDA context is unusable.
  void CheckDeviceHealth();
  // Reports the session KV store's state through the health service name "framezip.kvstore"
  // and metrics (housekeeping thread).
  void CheckStoreHealth();

  ServerConfig config_;
  std::shared_ptr<media::MediaBackend> media_;  // before engine_: outlives it
  std::unique_ptr<TurnEngine> engine_;
  std::unique_ptr<SessionStore> sessions_;
  std::unique_ptr<SharedSessions> shared_;  // null unless sessions are shared
  std::unique_ptr<ServerMetrics> metrics_;
  BearerAuth auth_;
  std::unique_ptr<VideoChatService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<OpenAiHttpServer> openai_;  // null unless --openai-listen
  std::filesystem::path media_dir_;
  bool remove_media_dir_ = false;
  int port_ = 0;
  int metrics_port_ = 0;
  int openai_port_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool store_serving_ = true;  // guarded by mu_
  bool stopping_ = false;
  bool drained_ = false;
  bool device_unhealthy_ = false;  // housekeeping thread only
  std::thread housekeeping_;
};

}  // namespace framezip::server
