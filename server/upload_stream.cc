#include "server/upload_stream.h"

#include <exception>
#include <fstream>

#include "common/client_text.h"
#include "common/logging.h"
#include "media/raw_frames.h"
#include "server/proto_convert.h"

namespace framezip::server {

UploadStream::UploadStream(ServiceCore* core, grpc::CallbackServerContext* context,
                           v1::Media* response)
    : core_(core), context_(context), response_(response), request_id_(core->NewId("upload")) {
  context_->AddTrailingMetadata("x-framezip-request-id", request_id_);
  StatusOr<std::string> principal = core_->Admit(*context_, /*refuse_when_draining=*/true);
  if (!principal.ok()) {
    FinishWith(principal.status());
    return;
  }
  principal_ = *std::move(principal);
  if (core_->uploads != nullptr) idle_entry_ = core_->uploads->Register([this] { Expire(); });
  StartRead(&message_);
}

void UploadStream::OnDone() {
  StopIdleTimer();  // waits for an Expire in progress
  if (reserved_bytes_ > 0 && core_->upload_budget != nullptr) {
    core_->upload_budget->Release(reserved_bytes_);
  }
  delete this;
}

void UploadStream::StopIdleTimer() {
  if (idle_entry_ != nullptr && core_->uploads != nullptr) core_->uploads->Unregister(*idle_entry_);
  idle_entry_.reset();
}

void UploadStream::Expire() {
  const auto seconds =
      std::chrono::duration<double>(core_->uploads->idle_timeout()).count();
  FinishWith(DeadlineExceededError(
      "the upload sent nothing for {:.0f} s (upload_idle_timeout_seconds); start it again", seconds));
}

void UploadStream::OnReadDone(bool ok) {
  if (finish_claimed_.load()) return;  // expired, or failed: nothing more to read
  if (!ok) {
    // Half-close (all chunks sent) or a broken call. From here on the idle timeout cannot fire
    // (validation may take seconds; the timeout is for the client), so if it has not claimed the
    // call's end by now, nothing but this reactor will.
    StopIdleTimer();
    if (finish_claimed_.load()) return;
    if (context_->IsCancelled()) {
      FinishWith(CancelledError("the upload was cancelled"));
    } else if (!have_metadata_) {
      FinishWith(InvalidArgumentError("metadata: the upload sent no message"));
    } else if (data_.size() != input_.declared_size_bytes) {
      FinishWith(InvalidArgumentError(
          "declared_size_bytes: {} bytes were declared but {} were sent",
          input_.declared_size_bytes, data_.size()));
    } else {
      core_->media_pool->Post([this] { Process(); });
    }
    return;
  }
  if (idle_entry_ != nullptr) core_->uploads->Touch(*idle_entry_);
  Status status;
  try {
    status = Take(message_);
  } catch (const std::exception& e) {
    FZ_LOG_ERROR("UploadMedia request {}: {}", request_id_, e.what());
    status = InternalError("the server failed to take the chunk (request id {})", request_id_);
  }
  if (!status.ok()) {
    FinishWith(status);
    return;
  }
  StartRead(&message_);
}

Status UploadStream::Take(const v1::UploadMediaRequest& message) {
  if (!have_metadata_) {
    FZ_ASSIGN_OR_RETURN(input_, ValidateUploadMetadata(message, core_->options.upload.max_upload_bytes,
                                                       core_->options.validation));
    StatusOr<std::string> key = core_->sessions->CheckMediaRoom(input_.session_id, principal_);
    // With shared sessions the session may live on another replica (or have changed there): the
    // store is asked on the media pool once the bytes are in (no store call in a reaction).
    if (!key.ok() && !(core_->shared != nullptr && absl::IsNotFound(key.status()))) {
      return key.status();
    }
    if (key.ok()) session_key_ = *key;
    if (core_->upload_budget != nullptr) {
      FZ_RETURN_IF_ERROR(core_->upload_budget->Reserve(input_.declared_size_bytes));
      reserved_bytes_ = input_.declared_size_bytes;
    }
    have_metadata_ = true;
    // Reserve a bounded amount up front: the declared size is the client's word.
    data_.reserve(std::min<uint64_t>(input_.declared_size_bytes, 64u << 20));
    return absl::OkStatus();
  }
  if (message.payload_case() != v1::UploadMediaRequest::kChunk) {
    return InvalidArgumentError(
        "metadata: only the first UploadMedia message may carry metadata; later ones carry "
        "chunks");
  }
  const std::string& chunk = message.chunk();
  if (chunk.size() > kMaxChunkBytes) {
    return InvalidArgumentError("chunk: {} bytes is over the limit of {} per message",
                                chunk.size(), kMaxChunkBytes);
  }
  if (data_.size() + chunk.size() > input_.declared_size_bytes) {
    return InvalidArgumentError(
        "declared_size_bytes: the upload sent more than the {} bytes it declared",
        input_.declared_size_bytes);
  }
  data_.append(chunk);
  return absl::OkStatus();
}

Status UploadStream::StoreAndValidate() {
  const auto t0 = Clock::now();
  if (core_->shared != nullptr) {
    FZ_RETURN_IF_ERROR(core_->SyncSession(principal_, input_.session_id));
    FZ_ASSIGN_OR_RETURN(session_key_,
                        core_->sessions->CheckMediaRoom(input_.session_id, principal_));
  }
  const std::string media_id = core_->NewId("media");
  const auto path = core_->MediaPath(session_key_, media_id);
  {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    std::ofstream out(path, std::ios::binary);
    if (input_.raw_frames) {
      // Decoded frames are stored as a raw-frames file, which the media stage reads as it reads
      // a container (media/raw_frames.h).
      const std::string header = media::EncodeRawFramesHeader(*input_.raw_frames);
      out.write(header.data(), static_cast<std::streamsize>(header.size()));
    }
    out.write(data_.data(), static_cast<std::streamsize>(data_.size()));
    out.close();
    if (ec || !out) {
      std::filesystem::remove(path, ec);
      // A DeleteSession racing this upload removes the directory: that is the session's end,
      // not a server failure.
      if (!core_->sessions->Get(input_.session_id, principal_).ok()) {
        return NotFoundError("session '{}' was deleted or expired during the upload",
                             input_.session_id);
      }
      FZ_LOG_ERROR("UploadMedia request {}: cannot write {}", request_id_, path.string());
      return InternalError("the server could not store the media (request id {})", request_id_);
    }
  }
  std::string().swap(data_);  // the bytes are on disk: free the buffer now
  if (reserved_bytes_ > 0 && core_->upload_budget != nullptr) {
    core_->upload_budget->Release(reserved_bytes_);
    reserved_bytes_ = 0;
  }
  Status status;
  StatusOr<SessionRecord> session = core_->sessions->Get(input_.session_id, principal_);
  if (!session.ok() || session->key != session_key_) {
    status = NotFoundError("session '{}' was deleted or expired during the upload",
                           input_.session_id);
  } else {
    const FrameSpec frames = input_.has_frames ? input_.frames : session->spec.frames;
    StatusOr<MediaInfo> info =
        ValidateMedia(*core_->media_backend, path, input_.mime_type, core_->options.upload, frames,
                      core_->engine->model().vision, core_->options.validation.max_frames);
    status = info.status();
    if (status.ok()) {
      info->media_id = media_id;
      info->name = input_.name;
      info->path = path.string();
      ToProto(*info, response_);
      status = core_->sessions->AddMedia(session_key_, *info);
      if (status.ok()) core_->PublishSession(session_key_);
      if (status.ok() && core_->metrics != nullptr) {
        core_->metrics->RecordMediaProbe(std::chrono::duration<double>(Clock::now() - t0).count(),
                                         static_cast<uint32_t>(info->frame_timestamps.size()));
      }
    }
  }
  if (!status.ok()) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    // A DeleteSession racing the check removes the session's directory under it: that is the
    // session's end, whatever the check made of the missing file.
    StatusOr<SessionRecord> now = core_->sessions->Get(input_.session_id, principal_);
    if (!now.ok() || now->key != session_key_) {
      return NotFoundError("session '{}' was deleted or expired during the upload",
                           input_.session_id);
    }
  }
  return status;
}

void UploadStream::Process() {
  Status status;
  try {
    status = StoreAndValidate();
  } catch (const std::exception& e) {
    FZ_LOG_ERROR("UploadMedia request {}: {}", request_id_, e.what());
    status = InternalError("the server failed to process the upload (request id {})",
                           request_id_);
  }
  std::string().swap(data_);
  FinishWith(status);
}

void UploadStream::FinishWith(const Status& status) {
  if (finish_claimed_.exchange(true)) return;
  Finish(core_->Outcome("UploadMedia", request_id_, status));
}

}  // namespace framezip::server
