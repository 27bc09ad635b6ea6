// framezip.v1.VideoChat over the gRPC callback API. Unary RPCs (sessions, model info) answer
// inline: they touch only in-memory state under short locks. Chat and Generate stream through
// TurnStream, UploadMedia reads through UploadStream; slow work (media probing) runs on the
// service's media pool and turns run on the engine, never in a reaction.
//
// Thread-safe. The gRPC server must be shut down before the service is destroyed.
#pragma once

#include <functional>
#include <memory>

#include "framezip/v1/video_chat.grpc.pb.h"
#include "server/service_core.h"

namespace framezip::server {

class VideoChatService final : public v1::VideoChat::CallbackService {
 public:
  // `engine`, `sessions`, `media_backend`, `metrics` (nullable) and `auth` (nullable) must
  // outlive the service.
  // `shared` (nullable) shares sessions with other replicas through the KV store.
  VideoChatService(TurnEngine* engine, SessionStore* sessions, media::MediaBackend* media_backend,
                   ServerMetrics* metrics, const BearerAuth* auth, ServiceOptions options,
                   SharedSessions* shared = nullptr);
  ~VideoChatService() override;

  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* context,
                                          const v1::CreateSessionRequest* request,
                                          v1::Session* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::Session* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest* request,
                                         v1::ListSessionsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const v1::DeleteSessionRequest* request,
                                          v1::DeleteSessionResponse* response) override;
  grpc::ServerUnaryReactor* DeleteMedia(grpc::CallbackServerContext* context,
                                        const v1::DeleteMediaRequest* request,
                                        v1::DeleteMediaResponse* response) override;
  grpc::ServerReadReactor<v1::UploadMediaRequest>* UploadMedia(
      grpc::CallbackServerContext* context, v1::Media* response) override;
  grpc::ServerWriteReactor<v1::ChatResponse>* Chat(grpc::CallbackServerContext* context,
                                                   const v1::ChatRequest* request) override;
  grpc::ServerWriteReactor<v1::ChatResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;

  // From now on new turns, sessions and uploads get UNAVAILABLE (drain).
  void StartDraining() { core_.draining.store(true); }
  // The transport-neutral core, for the OpenAI-compatible HTTP API beside gRPC.
  ServiceCore* core() { return &core_; }
  // Expires idle sessions (freeing their KV and media) and refreshes the gauges. Called
  // periodically by the server's housekeeping thread.
  void Housekeeping();

 private:
  // Frees what a removed session held: its running turn, its KV, its media files.
  std::vector<KvBytes> Release(const SessionRecord& record);
  std::string RequestId(grpc::CallbackServerContext* context);
  // Runs a unary RPC's body and finishes the call: inline, or on the store pool when it calls the
  // shared KV store (`calls_store` and sessions are shared).
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, const char* rpc,
                                  bool calls_store, std::function<Status()> body);

  ServiceCore core_;
  std::unique_ptr<WorkPool> media_pool_;
  std::unique_ptr<WorkPool> store_pool_;
  UploadBudget upload_budget_;
  UploadRegistry uploads_;
};

}  // namespace framezip::server
