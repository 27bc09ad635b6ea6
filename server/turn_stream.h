// TurnStream: the server-streaming reactor of Chat and Generate.
//
// The engine reports a turn through callbacks on its step thread; this reactor queues what they
// produce and keeps exactly one write in flight (OnWriteDone takes the next). The last message
// is the turn's stats, then Finish(OK); a failed turn finishes with its status instead.
// Cancellation flows the other way: OnCancel (client gone or deadline) and a failed write call
// TurnEngine::Cancel, which ends the turn within one engine step and frees its pages; the
// reactor then finishes when the engine's on_done arrives, so it never outlives or precedes the
// engine's last callback. The reactor deletes itself in OnDone.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "framezip/v1/video_chat.grpc.pb.h"
#include "server/service_core.h"

namespace framezip::server {

class TurnStream final : public grpc::ServerWriteReactor<v1::ChatResponse> {
 public:
  // Both return a reactor that has started (or already finished with an error).
  static TurnStream* StartChat(ServiceCore* core, grpc::CallbackServerContext* context,
                               const v1::ChatRequest* request);
  static TurnStream* StartGenerate(ServiceCore* core, grpc::CallbackServerContext* context,
                                   const v1::GenerateRequest* request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  TurnStream(ServiceCore* core, grpc::CallbackServerContext* context, const char* rpc);
  Status BeginChat(const v1::ChatRequest& request);
  void PrepareGenerate(const v1::GenerateRequest* request);  // on the media pool
  // Hands the turn to the engine; finishes the call when the engine refuses it.
  void Submit(TurnRequest request);
  void OnDelta(std::string text, std::vector<uint32_t> token_ids);
  void OnTurnDone(Status status, TurnStats stats);
  // The rest of a turn's end: temp files, metrics, the log line, the stats message and Finish.
  void DeliverEnd(const Status& status, const TurnStats& stats);
  // Ends the call now (no turn running). Must be the last use of `this`.
  void FinishWith(const Status& status);
  // Starts the next write or the Finish when due, releasing `lock` first; the caller must not
  // touch `this` afterwards (Finish may delete it).
  void Pump(std::unique_lock<std::mutex>& lock);

  ServiceCore* const core_;
  grpc::CallbackServerContext* const context_;
  const char* const rpc_;
  std::string turn_id_;
  std::string session_id_;   // empty for Generate
  std::string session_key_;  // the session's incarnation (SessionRecord::key)
  std::string principal_;
  ChatMessage user_;        // the message this turn adds to the session
  bool stats_only_ = false;
  std::vector<std::filesystem::path> temp_files_;  // Generate's inline media
  std::string answer_;  // engine thread only

  std::mutex mu_;
  std::deque<v1::ChatResponse> queue_;
  v1::ChatResponse in_flight_;  // the message being written (alive until OnWriteDone)
  bool writing_ = false;
  bool client_gone_ = false;
  bool cancelled_ = false;  // OnCancel seen
  bool submitted_ = false;  // the engine has (or is being given) the turn
  std::shared_ptr<std::atomic<bool>> cancel_flag_;  // the turn's cancellation token
  bool finish_due_ = false;
  bool finished_ = false;
  grpc::Status final_status_;
};

}  // namespace framezip::server
