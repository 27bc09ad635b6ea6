// UploadStream: the client-streaming reactor of UploadMedia.
//
// The first message carries the metadata, checked at once: the session (owned by the caller),
// room for one more media item, the declared size within the per-upload limit and within the
// server-wide upload buffer (UploadBudget, reserved until the call ends). Chunks follow, each at
// most 4 MiB, never more bytes than declared; a stream that sends nothing for the idle timeout is
// ended with DEADLINE_EXCEEDED (UploadRegistry). When the client half-closes, on the media pool:
// the bytes are written to the session's media directory and validated the way a Chat will use
// them (server/media_probe.h: probe, then decode the planned frames, in the sandboxed media
// workers), then added to the session; the call returns the Media. Errors finish the call with
// the status that names the cause, and leave no file behind. The reactor deletes itself in
// OnDone.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "framezip/v1/video_chat.grpc.pb.h"
#include "server/service_core.h"

namespace framezip::server {

class UploadStream final : public grpc::ServerReadReactor<v1::UploadMediaRequest> {
 public:
  UploadStream(ServiceCore* core, grpc::CallbackServerContext* context, v1::Media* response);

  void OnReadDone(bool ok) override;
  void OnDone() override;

  static constexpr size_t kMaxChunkBytes = 4u << 20;

 private:
  Status Take(const v1::UploadMediaRequest& message);
  void Process();  // on the media pool
  // Stores, validates and adds the media; the status of the call.
  Status StoreAndValidate();
  // The idle timeout passed (housekeeping thread).
  void Expire();
  // Finishes the call once; later calls (a racing read or timeout) do nothing. The caller must
  // not touch `this` afterwards.
  void FinishWith(const Status& status);
  void StopIdleTimer();

  ServiceCore* const core_;
  grpc::CallbackServerContext* const context_;
  v1::Media* const response_;
  const std::string request_id_;
  v1::UploadMediaRequest message_;
  bool have_metadata_ = false;
  std::string principal_;
  std::string session_key_;
  UploadInput input_;
  std::string data_;
  uint64_t reserved_bytes_ = 0;  // of the server's upload buffer, given back in OnDone
  std::shared_ptr<UploadRegistry::Entry> idle_entry_;
  std::atomic<bool> finish_claimed_{false};
};

}  // namespace framezip::server
