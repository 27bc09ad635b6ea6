// What the VideoChat reactors share: the engine, the sessions, metrics, auth, limits and the
// worker pool for slow work. Owned by VideoChatService; reactors hold a plain pointer because the
// service outlives every call (the gRPC server is shut down before the service is destroyed).
#pragma once

#include <grpcpp/server_context.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "server/auth.h"
#include "server/media_probe.h"
#include "server/metrics.h"
#include "server/request_validation.h"
#include "server/session_store.h"
#include "server/turn_engine.h"
#include "server/work_pool.h"

namespace framezip::server {

struct ServiceOptions {
  ValidationDefaults validation;
  UploadLimits upload;
  std::filesystem::path media_dir;  // must exist
  int media_threads = 2;
};

struct ServiceCore {
  TurnEngine* engine = nullptr;
  SessionStore* sessions = nullptr;
  ServerMetrics* metrics = nullptr;  // may be null (tests)
  const BearerAuth* auth = nullptr;
  ServiceOptions options;
  WorkPool* media_pool = nullptr;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_id{1};

  // "<prefix>-<n>-<random>": unique in this process, unguessable across processes.
  std::string NewId(const char* prefix);
  // Where an uploaded media item is kept.
  std::filesystem::path MediaPath(const std::string& session_id, const std::string& media_id) const;
  // Auth, then drain state (when `refuse_when_draining`). Returns the first failure.
  Status Admit(const grpc::ServerContextBase& context, bool refuse_when_draining) const;
  // Counts the RPC's outcome and converts the status for gRPC; logs INTERNAL/UNKNOWN errors with
  // the request id.
  grpc::Status Outcome(const char* rpc, const std::string& request_id, const Status& status);
};

// The deadline of a call as a steady_clock time (max() when none).
Clock::time_point SteadyDeadline(const grpc::ServerContextBase& context);

}  // namespace framezip::server
