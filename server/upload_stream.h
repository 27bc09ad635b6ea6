// UploadStream: the client-streaming reactor of UploadMedia.
//
// The first message carries the metadata (checked at once: session, declared size within the
// limit, room for one more media item); chunks follow, each at most 4 MiB, never more bytes than
// declared. When the client half-closes, the bytes are probed on the media pool (container,
// codec, limits; see server/media_probe.h), written to the media directory and added to the
// session; the call returns the Media. Errors finish the call at once with the status that names
// the cause. The reactor deletes itself in OnDone.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "framezip/v1/video_chat.grpc.pb.h"
#include "server/service_core.h"

namespace framezip::server {

class UploadStream final : public grpc::ServerReadReactor<v1::UploadMediaRequest> {
 public:
  UploadStream(ServiceCore* core, grpc::CallbackServerContext* context, v1::Media* response);

  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

  static constexpr size_t kMaxChunkBytes = 4u << 20;

 private:
  Status Take(const v1::UploadMediaRequest& message);
  void Process();  // on the media pool
  void FinishWith(const Status& status);  // last use of `this`

  ServiceCore* const core_;
  grpc::CallbackServerContext* const context_;
  v1::Media* const response_;
  const std::string request_id_;
  v1::UploadMediaRequest message_;
  bool have_metadata_ = false;
  UploadInput input_;
  std::string data_;
};

}  // namespace framezip::server
