#include "server/upload_stream.h"

#include <exception>
#include <fstream>

#include "common/logging.h"
#include "server/proto_convert.h"

namespace framezip::server {

UploadStream::UploadStream(ServiceCore* core, grpc::CallbackServerContext* context,
                           v1::Media* response)
    : core_(core), context_(context), response_(response), request_id_(core->NewId("upload")) {
  context_->AddTrailingMetadata("x-framezip-request-id", request_id_);
  if (Status s = core_->Admit(*context_, /*refuse_when_draining=*/true); !s.ok()) {
    FinishWith(s);
    return;
  }
  StartRead(&message_);
}

void UploadStream::OnReadDone(bool ok) {
  if (!ok) {
    // Half-close (all chunks sent) or a broken call.
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
    FZ_RETURN_IF_ERROR(core_->sessions->CheckMediaRoom(input_.session_id));
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

void UploadStream::Process() {
  Status status;
  try {
    const auto t0 = Clock::now();
    const auto* bytes = reinterpret_cast<const uint8_t*>(data_.data());
    StatusOr<MediaInfo> info =
        ProbeUpload({bytes, data_.size()}, input_.mime_type, core_->options.upload);
    status = info.status();
    if (status.ok()) {
      StatusOr<SessionRecord> session = core_->sessions->Get(input_.session_id);
      status = session.status();
      if (status.ok()) {
        info->media_id = core_->NewId("media");
        info->name = input_.name;
        info->frames = input_.has_frames ? input_.frames : session->spec.frames;
        PlanFrames(info->frames, core_->engine->model().vision,
                   core_->options.validation.max_frames, *info);
        const auto path = core_->MediaPath(input_.session_id, info->media_id);
        std::filesystem::create_directories(path.parent_path());
        {
          std::ofstream out(path, std::ios::binary);
          out.write(data_.data(), static_cast<std::streamsize>(data_.size()));
          if (!out) {
            FZ_LOG_ERROR("UploadMedia request {}: cannot write {}", request_id_, path.string());
            status = InternalError("the server could not store the media (request id {})",
                                   request_id_);
          }
        }
        info->path = path.string();
        if (status.ok()) {
          ToProto(*info, response_);
          status = core_->sessions->AddMedia(input_.session_id, *info);
        }
        if (!status.ok()) {
          std::error_code ec;
          std::filesystem::remove(path, ec);
        }
        if (status.ok() && core_->metrics != nullptr) {
          core_->metrics->RecordMediaProbe(std::chrono::duration<double>(Clock::now() - t0).count(),
                                           static_cast<uint32_t>(info->frame_timestamps.size()));
        }
      }
    }
  } catch (const std::exception& e) {
    FZ_LOG_ERROR("UploadMedia request {}: {}", request_id_, e.what());
    status = InternalError("the server failed to process the upload (request id {})",
                           request_id_);
  }
  std::string().swap(data_);  // free the bytes before the call ends
  FinishWith(status);
}

void UploadStream::FinishWith(const Status& status) {
  Finish(core_->Outcome("UploadMedia", request_id_, status));
}

}  // namespace framezip::server
