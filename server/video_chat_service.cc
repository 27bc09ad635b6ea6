#include "server/video_chat_service.h"

#include <exception>

#include "common/logging.h"
#include "server/proto_convert.h"
#include "server/turn_stream.h"
#include "server/upload_stream.h"

namespace framezip::server {
namespace {

// KvDurability converts to the proto enum by cast.
static_assert(static_cast<int>(KvDurability::kNoStore) == v1::KV_DURABILITY_NO_STORE);
static_assert(static_cast<int>(KvDurability::kDurable) == v1::KV_DURABILITY_DURABLE);
static_assert(static_cast<int>(KvDurability::kPending) == v1::KV_DURABILITY_PENDING);
static_assert(static_cast<int>(KvDurability::kNotDurable) == v1::KV_DURABILITY_NOT_DURABLE);

// Runs a unary handler body, turning escaped exceptions into INTERNAL (docs/DEVELOPING.md §3).
template <typename Body>
Status Guard(const char* rpc, const std::string& request_id, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    FZ_LOG_ERROR("{} request {}: {}", rpc, request_id, e.what());
    return InternalError("the server failed (request id {})", request_id);
  }
}

}  // namespace

VideoChatService::VideoChatService(TurnEngine* engine, SessionStore* sessions,
                                   media::MediaBackend* media_backend, ServerMetrics* metrics,
                                   const BearerAuth* auth, ServiceOptions options,
                                   SharedSessions* shared)
    : media_pool_(std::make_unique<WorkPool>("media", options.media_threads)),
      store_pool_(std::make_unique<WorkPool>("store", 2)),
      upload_budget_(options.max_upload_buffer_bytes),
      uploads_(options.upload_idle_timeout) {
  core_.engine = engine;
  core_.sessions = sessions;
  core_.media_backend = media_backend;
  core_.upload_budget = &upload_budget_;
  core_.uploads = &uploads_;
  core_.metrics = metrics;
  core_.auth = auth;
  core_.options = std::move(options);
  core_.media_pool = media_pool_.get();
  core_.shared = shared;
  core_.store_pool = store_pool_.get();
}

VideoChatService::~VideoChatService() = default;

grpc::ServerUnaryReactor* VideoChatService::Unary(grpc::CallbackServerContext* context,
                                                  const char* rpc, bool calls_store,
                                                  std::function<Status()> body) {
  auto* reactor = context->DefaultReactor();
  auto run = [this, reactor, rpc, id = RequestId(context), body = std::move(body)] {
    const Status status = Guard(rpc, id, body);
    reactor->Finish(core_.Outcome(rpc, id, status));
  };
  // With shared sessions the body calls the KV store: not in a reaction.
  if (calls_store && core_.shared != nullptr) {
    core_.store_pool->Post(std::move(run));
  } else {
    run();
  }
  return reactor;
}

std::string VideoChatService::RequestId(grpc::CallbackServerContext* context) {
  std::string id = core_.NewId("req");
  context->AddTrailingMetadata("x-framezip-request-id", id);
  return id;
}

grpc::ServerUnaryReactor* VideoChatService::CreateSession(grpc::CallbackServerContext* context,
                                                          const v1::CreateSessionRequest* request,
                                                          v1::Session* response) {
  return Unary(context, "CreateSession", true, [this, context, request, response]() -> Status {
    FZ_ASSIGN_OR_RETURN(const std::string principal,
                        core_.Admit(*context, /*refuse_when_draining=*/true));
    FZ_ASSIGN_OR_RETURN(SessionSpec spec,
                        ValidateCreateSession(*request, core_.options.validation));
    // A session of that id on another replica takes the id as well.
    if (!spec.session_id.empty()) FZ_RETURN_IF_ERROR(core_.SyncSession(principal, spec.session_id));
    FZ_ASSIGN_OR_RETURN(SessionRecord record, core_.sessions->Create(std::move(spec), principal));
    core_.PublishSession(record.key);
    ToProto(record, {}, 0, response);
    FZ_LOG_INFO("session {} created (policy {}, ttl {} s)", record.spec.session_id,
                record.spec.policy.name(), record.spec.ttl_seconds);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VideoChatService::GetSession(grpc::CallbackServerContext* context,
                                                       const v1::GetSessionRequest* request,
                                                       v1::Session* response) {
  return Unary(context, "GetSession", true, [this, context, request, response]() -> Status {
    FZ_ASSIGN_OR_RETURN(const std::string principal,
                        core_.Admit(*context, /*refuse_when_draining=*/false));
    FZ_RETURN_IF_ERROR(ValidateSessionId(request->session_id(), "session_id"));
    FZ_RETURN_IF_ERROR(core_.SyncSession(principal, request->session_id()));
    FZ_ASSIGN_OR_RETURN(SessionRecord record,
                        core_.sessions->Get(request->session_id(), principal));
    ToProto(record, core_.engine->SessionKv(record.key),
            core_.engine->SessionCachedTokens(record.key), response);
    response->set_kv_durability(
        static_cast<v1::KvDurability>(core_.engine->SessionDurability(record.key)));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VideoChatService::ListSessions(grpc::CallbackServerContext* context,
                                                         const v1::ListSessionsRequest* request,
                                                         v1::ListSessionsResponse* response) {
  return Unary(context, "ListSessions", false, [this, context, request, response]() -> Status {
    FZ_ASSIGN_OR_RETURN(const std::string principal,
                        core_.Admit(*context, /*refuse_when_draining=*/false));
    FZ_ASSIGN_OR_RETURN(SessionPage page, core_.sessions->List(principal, request->page_size(),
                                                               request->page_token()));
    for (const SessionRecord& record : page.sessions) {
      v1::Session* session = response->add_sessions();
      ToProto(record, core_.engine->SessionKv(record.key),
              core_.engine->SessionCachedTokens(record.key), session);
      session->set_kv_durability(
          static_cast<v1::KvDurability>(core_.engine->SessionDurability(record.key)));
    }
    response->set_next_page_token(page.next_page_token);
    return absl::OkStatus();
  });
}

std::vector<KvBytes> VideoChatService::Release(const SessionRecord& record) {
  if (!record.running_turn_id.empty()) {
    // The turn ends within one engine step; its end (TurnStream) releases what it kept.
    core_.engine->Cancel(record.running_turn_id, CancelledError("the session was deleted"));
  }
  return core_.ReleaseSessionResources(record.key);
}

grpc::ServerUnaryReactor* VideoChatService::DeleteSession(grpc::CallbackServerContext* context,
                                                          const v1::DeleteSessionRequest* request,
                                                          v1::DeleteSessionResponse* response) {
  return Unary(context, "DeleteSession", true, [this, context, request, response]() -> Status {
    FZ_ASSIGN_OR_RETURN(const std::string principal,
                        core_.Admit(*context, /*refuse_when_draining=*/false));
    FZ_RETURN_IF_ERROR(ValidateSessionId(request->session_id(), "session_id"));
    FZ_RETURN_IF_ERROR(core_.SyncSession(principal, request->session_id()));
    FZ_ASSIGN_OR_RETURN(SessionRecord record,
                        core_.sessions->Remove(request->session_id(), principal));
    if (core_.shared != nullptr) {
      if (Status s = core_.shared->Remove(principal, record.spec.session_id, record.key); !s.ok()) {
        FZ_LOG_WARN("session {}: removing it from the shared store failed: {}",
                    record.spec.session_id, MessageOf(s));
      }
    }
    uint64_t total = 0;
    for (const KvBytes& kv : Release(record)) {
      ToProto(kv, response->add_freed());
      total += kv.bytes;
    }
    FZ_LOG_INFO("session {} deleted ({} KV bytes freed)", record.spec.session_id, total);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* VideoChatService::DeleteMedia(grpc::CallbackServerContext* context,
                                                        const v1::DeleteMediaRequest* request,
                                                        v1::DeleteMediaResponse* response) {
  return Unary(context, "DeleteMedia", true, [this, context, request, response]() -> Status {
    FZ_ASSIGN_OR_RETURN(const std::string principal,
                        core_.Admit(*context, /*refuse_when_draining=*/false));
    FZ_RETURN_IF_ERROR(ValidateSessionId(request->session_id(), "session_id"));
    FZ_RETURN_IF_ERROR(ValidateMediaId(request->media_id(), "media_id"));
    FZ_RETURN_IF_ERROR(core_.SyncSession(principal, request->session_id()));
    FZ_ASSIGN_OR_RETURN(
        MediaInfo media,
        core_.sessions->RemoveMedia(request->session_id(), principal, request->media_id()));
    if (StatusOr<SessionRecord> now = core_.sessions->Get(request->session_id(), principal);
        now.ok()) {
      core_.PublishSession(now->key);
    }
    std::error_code ec;
    std::filesystem::remove(media.path, ec);
    response->set_freed_bytes(media.size_bytes);
    FZ_LOG_INFO("session {}: media {} deleted ({} bytes)", request->session_id(), media.media_id,
                media.size_bytes);
    return absl::OkStatus();
  });
}

grpc::ServerReadReactor<v1::UploadMediaRequest>* VideoChatService::UploadMedia(
    grpc::CallbackServerContext* context, v1::Media* response) {
  return new UploadStream(&core_, context, response);
}

grpc::ServerWriteReactor<v1::ChatResponse>* VideoChatService::Chat(
    grpc::CallbackServerContext* context, const v1::ChatRequest* request) {
  return TurnStream::StartChat(&core_, context, request);
}

grpc::ServerWriteReactor<v1::ChatResponse>* VideoChatService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return TurnStream::StartGenerate(&core_, context, request);
}

grpc::ServerUnaryReactor* VideoChatService::GetModelInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetModelInfoRequest* request,
                                                         v1::ModelInfo* response) {
  return Unary(context, "GetModelInfo", false, [this, context, request, response]() -> Status {
    FZ_RETURN_IF_ERROR(core_.Admit(*context, /*refuse_when_draining=*/false).status());
    FZ_RETURN_IF_ERROR(ValidateModel(request->model(), core_.options.validation));
    ToProto(core_.engine->model(), core_.options.validation.default_policy,
            core_.options.upload.max_upload_bytes, response);
    return absl::OkStatus();
  });
}

void VideoChatService::Housekeeping() {
  for (const SessionRecord& record : core_.sessions->ExpireIdle()) {
    if (core_.shared != nullptr) {
      // This replica's copy idled out; other replicas may still use the session: its blocks and
      // media stay (the store's own retention bounds them).
      core_.engine->ForgetSession(record.key);
    } else {
      Release(record);
    }
    FZ_LOG_INFO("session {} expired after {} s idle", record.spec.session_id,
                record.spec.ttl_seconds);
  }
  if (core_.uploads != nullptr) core_.uploads->ExpireIdle();
  if (core_.metrics == nullptr) return;
  std::vector<KvBytes> kv;
  for (const SessionRecord& r : core_.sessions->All()) {
    for (const KvBytes& b : core_.engine->SessionKv(r.key)) kv.push_back(b);
  }
  core_.metrics->SetLoad(core_.engine->Load(), kv);
  core_.metrics->SetUploadBufferBytes(upload_budget_.reserved());
}

}  // namespace framezip::server
