#include "media/worker/handle_request.h"

#include <exception>
#include <new>

#include "media/media.h"

namespace framezip::media::worker {
namespace {

WorkResponse FromStatus(const Status& status) {
  WorkResponse r;
  r.code = static_cast<int32_t>(status.code());
  r.message = MessageOf(status);
  return r;
}

WorkResponse Run(const WorkRequest& request, int media_fd, FrameData* frames) {
  const MediaSource source = MediaSource::FromFd(media_fd);
  DecodeOptions options;
  if (request.has_content_hash) options.known_content_hash = request.content_hash;
  options.frames_in_memfd = true;  // handed to the server as they lie
  WorkResponse response;
  switch (request.op) {
    case WorkOp::kProbe: {
      StatusOr<MediaInfo> info = ProbeMedia(source, request.limits, options);
      if (!info.ok()) return FromStatus(info.status());
      response.result.info = *std::move(info);
      return response;
    }
    case WorkOp::kVerify: {
      StatusOr<DecodedMedia> verified =
          VerifyMedia(source, request.sampling, request.limits, options);
      if (!verified.ok()) return FromStatus(verified.status());
      response.result = *std::move(verified);
      return response;
    }
    case WorkOp::kDecode: {
      StatusOr<DecodedMedia> decoded =
          DecodeMedia(source, request.sampling, request.preprocess, request.limits, options);
      if (!decoded.ok()) return FromStatus(decoded.status());
      response.result = *std::move(decoded);
      response.has_frames = !response.result.frames.data.empty();
      if (frames != nullptr) *frames = std::move(response.result.frames.data);
      response.result.frames.data.clear();
      return response;
    }
  }
  return FromStatus(InvalidArgumentError("unknown media worker operation"));
}

}  // namespace

WorkResponse HandleRequest(const WorkRequest& request, int media_fd, FrameData* frames) {
  try {
    return Run(request, media_fd, frames);
  } catch (const std::bad_alloc&) {
    return FromStatus(ResourceExhaustedError(
        "decoding this media needs more memory than a media worker may use "
        "(media_worker_memory_bytes)"));
  } catch (const std::exception& e) {
    return FromStatus(InternalError("the media worker failed: {}", e.what()));
  }
}

}  // namespace framezip::media::worker
