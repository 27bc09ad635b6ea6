#include "server/video_chat_service.h"

#include <exception>

#include "common/logging.h"
#include "server/proto_convert.h"
#include "server/turn_stream.h"
#include "server/upload_stream.h"

namespace framezip::server {
namespace {

// Runs a unary handler body, turning escaped exceptions into INTERNAL (STYLE.md §4.3.3).
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
                                   const BearerAuth* auth, ServiceOptions options)
    : media_pool_(std::make_unique<WorkPool>("media", options.media_threads)),
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
}

VideoChatService::~VideoChatService() = default;

std::string VideoChatService::RequestId(grpc::CallbackServerContext* context) {
  std::string id = core_.NewId("req");
  context->AddTrailingMetadata("x-framezip-request-id", id);
  return id;
}

grpc::ServerUnaryReactor* VideoChatService::CreateSession(grpc::CallbackServerContext* context,
                                                          const v1::CreateSessionRequest* request,
                                                          v1::Session* response) {
  const std::string id = RequestId(context);
  const Status status = Guard("CreateSession", id, [&]() -> Status {
    FZ_ASSIGN_OR_RETURN(const std::string principal,
                        core_.Admit(*context, /*refuse_when_draining=*/true));
    FZ_ASSIGN_OR_RETURN(SessionSpec spec,
                        ValidateCreateSession(*request, core_.options.validation));
    FZ_ASSIGN_OR_RETURN(SessionRecord record, core_.sessions->Create(std::move(spec), principal));
    ToProto(record, {}, 0, response);
    FZ_LOG_INFO("session {} created (policy {}, ttl {} s)", record.spec.session_id,
                PolicyName(record.spec.policy.kind), record.spec.ttl_seconds);
    return absl::OkStatus();
  });
  auto* reactor = context->DefaultReactor();
  reactor->Finish(core_.Outcome("CreateSession", id, status));
  return reactor;
}

grpc::ServerUnaryReactor* VideoChatService::GetSession(grpc::CallbackServerContext* context,
                                                       const v1::GetSessionRequest* request,
                                                       v1::Session* response) {
  const std::string id = RequestId(context);
  const Status status = Guard("GetSession", id, [&]() -> Status {
    FZ_ASSIGN_OR_RETURN(const std::string principal,
                        core_.Admit(*context, /*refuse_when_draining=*/false));
    FZ_RETURN_IF_ERROR(ValidateSessionId(request->session_id(), "session_id"));
    FZ_ASSIGN_OR_RETURN(SessionRecord record,
                        core_.sessions->Get(request->session_id(), principal));
    ToProto(record, core_.engine->SessionKv(record.key),
            core_.engine->SessionCachedTokens(record.key), response);
    return absl::OkStatus();
  });
  auto* reactor = context->DefaultReactor();
  reactor->Finish(core_.Outcome("GetSession", id, status));
  return reactor;
}

grpc::ServerUnaryReactor* VideoChatService::ListSessions(grpc::CallbackServerContext* context,
                                                         const v1::ListSessionsRequest* request,
                                                         v1::ListSessionsResponse* response) {
  const std::string id = RequestId(context);
  const Status status = Guard("ListSessions", id, [&]() -> Status {
    FZ_ASSIGN_OR_RETURN(const std::string principal,
                        core_.Admit(*context, /*refuse_when_draining=*/false));
    FZ_ASSIGN_OR_RETURN(SessionPage page, core_.sessions->List(principal, request->page_size(),
                                                               request->page_token()));
    for (const SessionRecord& record : page.sessions) {
      ToProto(record, core_.engine->SessionKv(record.key),
              core_.engine->SessionCachedTokens(record.key), response->add_sessions());
    }
    response->set_next_page_token(page.next_page_token);
    return absl::OkStatus();
  });
  auto* reactor = context->DefaultReactor();
  reactor->Finish(core_.Outcome("ListSessions", id, status));
  return reactor;
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
  const std::string id = RequestId(context);
  const Status status = Guard("DeleteSession", id, [&]() -> Status {
    FZ_ASSIGN_OR_RETURN(const std::string principal,
                        core_.Admit(*context, /*refuse_when_draining=*/false));
    FZ_RETURN_IF_ERROR(ValidateSessionId(request->session_id(), "session_id"));
    FZ_ASSIGN_OR_RETURN(SessionRecord record,
                        core_.sessions->Remove(request->session_id(), principal));
    uint64_t total = 0;
    for (const KvBytes& kv : Release(record)) {
      ToProto(kv, response->add_freed());
      total += kv.bytes;
    }
    FZ_LOG_INFO("session {} deleted ({} KV bytes freed)", record.spec.session_id, total);
    return absl::OkStatus();
  });
  auto* reactor = context->DefaultReactor();
  reactor->Finish(core_.Outcome("DeleteSession", id, status));
  return reactor;
}

grpc::ServerUnaryReactor* VideoChatService::DeleteMedia(grpc::CallbackServerContext* context,
                                                        const v1::DeleteMediaRequest* request,
                                                        v1::DeleteMediaResponse* response) {
  const std::string id = RequestId(context);
  const Status status = Guard("DeleteMedia", id, [&]() -> Status {
    FZ_ASSIGN_OR_RETURN(const std::string principal,
                        core_.Admit(*context, /*refuse_when_draining=*/false));
    FZ_RETURN_IF_ERROR(ValidateSessionId(request->session_id(), "session_id"));
    FZ_RETURN_IF_ERROR(ValidateMediaId(request->media_id(), "media_id"));
    FZ_ASSIGN_OR_RETURN(MediaInfo media, core_.sessions->RemoveMedia(request->session_id(),
                                                                     principal,
                                                                     request->media_id()));
    std::error_code ec;
    std::filesystem::remove(media.path, ec);
    response->set_freed_bytes(media.size_bytes);
    FZ_LOG_INFO("session {}: media {} deleted ({} bytes)", request->session_id(), media.media_id,
                media.size_bytes);
    return absl::OkStatus();
  });
  auto* reactor = context->DefaultReactor();
  reactor->Finish(core_.Outcome("DeleteMedia", id, status));
  return reactor;
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
  const std::string id = RequestId(context);
  const Status status = Guard("GetModelInfo", id, [&]() -> Status {
    FZ_RETURN_IF_ERROR(core_.Admit(*context, /*refuse_when_draining=*/false).status());
    FZ_RETURN_IF_ERROR(ValidateModel(request->model(), core_.options.validation));
    PolicySpec default_policy;
    default_policy.kind = core_.options.validation.default_policy;
    ToProto(core_.engine->model(), default_policy, core_.options.upload.max_upload_bytes,
            response);
    return absl::OkStatus();
  });
  auto* reactor = context->DefaultReactor();
  reactor->Finish(core_.Outcome("GetModelInfo", id, status));
  return reactor;
}

void VideoChatService::Housekeeping() {
  for (const SessionRecord& record : core_.sessions->ExpireIdle()) {
    Release(record);
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
