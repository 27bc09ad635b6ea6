#include "server/service_core.h"

#include <random>

#include "common/client_text.h"
#include "common/logging.h"
#include "server/grpc_status.h"

namespace framezip::server {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::DO_NOT_USE:
      break;
  }
  return "UNKNOWN";
}

}  // namespace

std::string ServiceCore::NewId(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}-{}-{:08x}", prefix, next_id.fetch_add(1), static_cast<uint32_t>(rng()));
}

std::filesystem::path ServiceCore::MediaDir(const std::string& session_key) const {
  // The key is a validated id ([A-Za-z0-9_-]) plus '.' and hex: a safe path component.
  return options.media_dir / session_key;
}

std::filesystem::path ServiceCore::MediaPath(const std::string& session_key,
                                             const std::string& media_id) const {
  // Media ids are server-made.
  return MediaDir(session_key) / (media_id + ".media");
}

StatusOr<std::string> ServiceCore::Admit(const grpc::ServerContextBase& context,
                                         bool refuse_when_draining) const {
  std::string principal;
  if (auth != nullptr) {
    FZ_ASSIGN_OR_RETURN(principal, auth->Authenticate(context));
  }
  FZ_RETURN_IF_ERROR(CheckDraining(refuse_when_draining));
  return principal;
}

StatusOr<std::string> ServiceCore::AdmitHeaders(const std::optional<std::string>& authorization,
                                                const std::optional<std::string>& tenant,
                                                bool refuse_when_draining) const {
  std::string principal;
  if (auth != nullptr) {
    FZ_ASSIGN_OR_RETURN(principal, auth->AuthenticateHeaders(authorization, tenant));
  }
  FZ_RETURN_IF_ERROR(CheckDraining(refuse_when_draining));
  return principal;
}

Status ServiceCore::CheckDraining(bool refuse_when_draining) const {
  if (refuse_when_draining && draining.load()) {
    return UnavailableError("the server is draining for shutdown; retry on another replica");
  }
  return absl::OkStatus();
}

std::vector<KvBytes> ServiceCore::ReleaseSessionResources(const std::string& session_key) {
  std::vector<KvBytes> freed = engine->ReleaseSession(session_key);
  const auto dir = MediaDir(session_key);
  media_pool->Post([dir] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  });
  return freed;
}

StatusOr<MediaInfo> ServiceCore::FindPrincipalMedia(const std::string& principal,
                                                    const std::string& media_id) const {
  for (const SessionRecord& record : sessions->All()) {
    if (record.owner != principal) continue;
    for (const MediaInfo& m : record.media) {
      if (m.media_id == media_id) return m;
    }
  }
  return NotFoundError("media '{}': no session of this caller holds it on this server",
                       ClientText(media_id));
}

std::optional<MediaInfo> ServiceCore::FindHeldMedia(const std::string& principal,
                                                    const std::string& content_hash,
                                                    const FrameSpec& frames) const {
  for (const SessionRecord& record : sessions->All()) {
    if (record.owner != principal) continue;
    for (const MediaInfo& m : record.media) {
      if (m.content_hash == content_hash && m.frames.num_frames == frames.num_frames &&
          m.frames.fps == frames.fps && m.frames.max_frames == frames.max_frames &&
          m.frames.start_seconds == frames.start_seconds &&
          m.frames.end_seconds == frames.end_seconds && !m.path.empty()) {
        return m;
      }
    }
  }
  return std::nullopt;
}

Status ServiceCore::SyncSession(const std::string& principal, const std::string& session_id) {
  if (shared == nullptr) return absl::OkStatus();
  StatusOr<SessionRecord> local = sessions->Get(session_id, principal);
  const int64_t known = local.ok() ? static_cast<int64_t>(local->revision) : -1;
  StatusOr<SharedSessions::Lookup> found =
      shared->Find(principal, session_id, known, local.ok() ? local->key : "");
  if (!found.ok()) {
    // The store is down: serve from what this replica has (the store's health says the rest).
    FZ_LOG_WARN("session '{}': checking the shared store failed: {}", session_id,
                MessageOf(found.status()));
    return absl::OkStatus();
  }
  switch (found->found) {
    case SharedSessions::Found::kNothingNewer:
      return absl::OkStatus();
    case SharedSessions::Found::kDeleted:
      // Deleted on another replica: only a copy that was once published can have been.
      if (local.ok() && local->published && local->running_turn_id.empty()) {
        sessions->Forget(session_id, principal);
        engine->ForgetSession(local->key);
        FZ_LOG_INFO("session {}: deleted on another replica; local copy dropped", session_id);
      }
      return absl::OkStatus();
    case SharedSessions::Found::kLost:
      // The store lost the session's records (restarted empty, flushed): this replica's copy is
      // the session; publish it again so the other replicas find it.
      FZ_LOG_WARN("session {}: the shared store lost its records; republishing revision {}",
                  session_id, local->revision);
      PublishSession(local->key);
      return absl::OkStatus();
    case SharedSessions::Found::kNewer:
      break;
  }
  SharedSession& newer = *found->session;
  newer.record.published = true;
  for (MediaInfo& m : newer.record.media) m.path = MediaPath(newer.record.key, m.media_id).string();
  if (local.ok() && local->key != newer.record.key) engine->ForgetSession(local->key);
  FZ_RETURN_IF_ERROR(engine->AdoptSharedKv(newer.record.key, newer.kv));
  const uint64_t revision = newer.record.revision;
  FZ_RETURN_IF_ERROR(sessions->Adopt(std::move(newer.record)));
  FZ_LOG_INFO("session {}: adopted revision {} from the shared store", session_id, revision);
  return absl::OkStatus();
}

void ServiceCore::PublishSession(const std::string& session_key) {
  if (shared == nullptr) return;
  StatusOr<SessionRecord> record = sessions->GetByKey(session_key);
  if (!record.ok()) return;  // deleted meanwhile
  const Status s = shared->Publish(*record, engine->ExportSharedKv(session_key));
  if (s.ok()) {
    sessions->MarkPublished(session_key);
  } else {
    FZ_LOG_WARN("session '{}': publishing revision {} to the shared store failed: {}",
                record->spec.session_id, record->revision, MessageOf(s));
  }
}

Status UploadBudget::Reserve(uint64_t bytes) {
  uint64_t now = reserved_.load();
  do {
    if (now + bytes > max_bytes_) {
      return ResourceExhaustedError(
          "uploads in progress hold {} bytes of the server's {}-byte upload buffer "
          "(max_upload_buffer_bytes); retry later",
          now, max_bytes_);
    }
  } while (!reserved_.compare_exchange_weak(now, now + bytes));
  return absl::OkStatus();
}

void UploadBudget::Release(uint64_t bytes) { reserved_.fetch_sub(bytes); }

grpc::Status ServiceCore::Outcome(const char* rpc, const std::string& request_id,
                                  const Status& status, const char* protocol) {
  const grpc::Status g = ToGrpcStatus(status);
  if (metrics != nullptr) metrics->RecordRpc(rpc, CodeName(g.error_code()), protocol);
  if (status.code() == absl::StatusCode::kInternal ||
      status.code() == absl::StatusCode::kUnknown) {
    FZ_LOG_ERROR("{} request {}: {}", rpc, request_id, MessageOf(status));
  } else if (!status.ok()) {
    FZ_LOG_DEBUG("{} request {}: {} {}", rpc, request_id, CodeName(g.error_code()),
                 MessageOf(status));
  }
  return g;
}

Clock::time_point SteadyDeadline(const grpc::ServerContextBase& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return Clock::time_point::max();
  const auto left = deadline - std::chrono::system_clock::now();
  if (left > std::chrono::hours(24 * 365)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
}

}  // namespace framezip::server
