// What the VideoChat reactors share: the engine, the sessions, metrics, auth, limits and the
// worker pool for slow work. Owned by VideoChatService; reactors hold a plain pointer because the
// service outlives every call (the gRPC server is shut down before the service is destroyed).
#pragma once

#include <grpcpp/server_context.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>

#include "server/auth.h"
#include "server/media_probe.h"
#include "server/metrics.h"
#include "server/request_validation.h"
#include "server/session_store.h"
#include "server/shared_sessions.h"
#include "server/turn_engine.h"
#include "server/upload_registry.h"
#include "server/work_pool.h"

namespace framezip::server {

struct ServiceOptions {
  ValidationDefaults validation;
  UploadLimits upload;
  std::filesystem::path media_dir;  // must exist
  int media_threads = 2;
  // Bytes all uploads in progress may hold together (UploadBudget).
  uint64_t max_upload_buffer_bytes = 2ull << 30;
  // An upload stream that sends nothing for this long is ended (UploadRegistry).
  std::chrono::milliseconds upload_idle_timeout{30000};
  // Conversations of the OpenAI API kept for reuse (server/conversation_reuse.h): at most this
  // many sessions (the least recently used idle one makes room), each idle at most this long
  // (0 = the session default).
  uint32_t max_conversations = 256;
  uint32_t conversation_ttl_seconds = 0;
};

// Bytes that uploads in progress may hold in server memory, all uploads together: each upload
// reserves its declared size when its metadata arrives and gives it back when it ends, so a flood
// of large uploads is refused (RESOURCE_EXHAUSTED) instead of exhausting memory. Thread-safe.
class UploadBudget {
 public:
  explicit UploadBudget(uint64_t max_bytes) : max_bytes_(max_bytes) {}
  // RESOURCE_EXHAUSTED (naming the limit) when `bytes` do not fit now.
  Status Reserve(uint64_t bytes);
  void Release(uint64_t bytes);
  uint64_t reserved() const { return reserved_.load(); }

 private:
  const uint64_t max_bytes_;
  std::atomic<uint64_t> reserved_{0};
};

struct ServiceCore {
  TurnEngine* engine = nullptr;
  SessionStore* sessions = nullptr;
  ServerMetrics* metrics = nullptr;  // may be null (tests)
  const BearerAuth* auth = nullptr;
  ServiceOptions options;
  WorkPool* media_pool = nullptr;
  // Sessions shared with other replicas through the KV store (null: not shared), and the pool
  // their store calls run on (never in a reaction, never on the engine's step thread).
  SharedSessions* shared = nullptr;
  WorkPool* store_pool = nullptr;
  media::MediaBackend* media_backend = nullptr;  // where uploads are probed and checked
  UploadBudget* upload_budget = nullptr;
  UploadRegistry* uploads = nullptr;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_id{1};

  // "<prefix>-<n>-<random>": unique in this process, unguessable across processes.
  std::string NewId(const char* prefix);
  // The directory of a session's media, and where one media item is kept (by the session's key,
  // so a session re-created under the same id never shares a directory with the old one).
  std::filesystem::path MediaDir(const std::string& session_key) const;
  std::filesystem::path MediaPath(const std::string& session_key,
                                  const std::string& media_id) const;
  // Auth, then drain state (when `refuse_when_draining`). Returns the principal the call acts
  // for, or the first failure.
  StatusOr<std::string> Admit(const grpc::ServerContextBase& context,
                              bool refuse_when_draining) const;
  // The same for a protocol whose headers are read by its own server (the OpenAI-compatible HTTP
  // API): "Authorization" and the tenant header's values, nullopt when absent.
  StatusOr<std::string> AdmitHeaders(const std::optional<std::string>& authorization,
                                     const std::optional<std::string>& tenant,
                                     bool refuse_when_draining) const;
  // Frees what a session still holds in the engine (its KV, in every tier) and on disk (its
  // media directory, on the media pool). Called when a session is deleted or expires, and again
  // when the last turn of a deleted session ends.
  std::vector<KvBytes> ReleaseSessionResources(const std::string& session_key);
  // A media item one of `principal`'s sessions holds (uploaded through UploadMedia), by its
  // media id. NOT_FOUND when no session of the principal has it on this replica.
  StatusOr<MediaInfo> FindPrincipalMedia(const std::string& principal,
                                         const std::string& media_id) const;
  // A media item one of `principal`'s sessions holds with these bytes (hex SHA-256) and this
  // frame sampling: already checked, so a stateless client that resends the bytes every turn
  // does not pay for a probe and a decode each time. nullopt when none.
  std::optional<MediaInfo> FindHeldMedia(const std::string& principal,
                                         const std::string& content_hash,
                                         const FrameSpec& frames) const;

  // Shared sessions (no-ops when `shared` is null). SyncSession brings this replica's copy of a
  // session up to the latest revision in the store: it adopts a newer one (conversation, media,
  // KV block keys) or forgets a copy another replica deleted. PublishSession writes the session's
  // current revision. Both call the store: run them on store_pool.
  Status SyncSession(const std::string& principal, const std::string& session_id);
  void PublishSession(const std::string& session_key);
  // Counts the RPC's outcome and converts the status for gRPC; logs INTERNAL/UNKNOWN errors with
  // the request id.
  // `protocol` labels the request in metrics: "grpc", or "http" for the OpenAI-compatible API.
  grpc::Status Outcome(const char* rpc, const std::string& request_id, const Status& status,
                       const char* protocol = "grpc");

 private:
  Status CheckDraining(bool refuse_when_draining) const;
};

// The deadline of a call as a steady_clock time (max() when none).
Clock::time_point SteadyDeadline(const grpc::ServerContextBase& context);

}  // namespace framezip::server
