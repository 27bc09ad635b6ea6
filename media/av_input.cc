#include "media/av_input.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

extern "C" {
#include <libavutil/avstring.h>
#include <libavutil/dict.h>
}

namespace framezip::media::internal {
namespace {

constexpr int kIoBufferSize = 64 * 1024;

// Demuxers we accept. Anything that can reference other files or URLs (hls, dash, concat,
// image2, sdp, rtsp, tee...) is absent on purpose. Audio-only formats are here so an audio file
// gets the precise "no video stream" error rather than "unsupported container".
constexpr const char* kAllowedDemuxers =
    "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,gif,mpegts,flv,ogg,ivf,h264,hevc,m4v,mjpeg,"
    "mpeg,mpegvideo,asf,nut,obu,mp3,wav,flac,aac";

bool DemuxerAllowed(const char* name) {
  return name != nullptr && av_match_name(name, kAllowedDemuxers) != 0;
}

int ReadPacket(void* opaque, uint8_t* buf, int buf_size) {
  auto* s = static_cast<AvInput::IoState*>(opaque);
  if (s->deadline != nullptr && s->deadline->Expired()) {
    s->read_failed = true;
    return AVERROR_EXIT;
  }
  const int64_t size = s->source.Size();
  if (s->pos >= size) return AVERROR_EOF;
  const int64_t want = std::min<int64_t>(buf_size, size - s->pos);
  if (s->source.fd >= 0) {
    const ssize_t got = ::pread(s->source.fd, buf, static_cast<size_t>(want), s->pos);
    if (got < 0) {
      s->read_failed = true;
      return AVERROR(errno);
    }
    if (got == 0) return AVERROR_EOF;
    s->pos += got;
    return static_cast<int>(got);
  }
  std::memcpy(buf, s->source.bytes.data() + s->pos, static_cast<size_t>(want));
  s->pos += want;
  return static_cast<int>(want);
}

int64_t Seek(void* opaque, int64_t offset, int whence) {
  auto* s = static_cast<AvInput::IoState*>(opaque);
  const int64_t size = s->source.Size();
  int64_t target = 0;
  switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE:
      return size;
    case SEEK_SET:
      target = offset;
      break;
    case SEEK_CUR:
      target = s->pos + offset;
      break;
    case SEEK_END:
      target = size + offset;
      break;
    default:
      return AVERROR(EINVAL);
  }
  if (target < 0 || target > size) return AVERROR(EINVAL);
  s->pos = target;
  return target;
}

int InterruptCallback(void* opaque) {
  const auto* deadline = static_cast<const Deadline*>(opaque);
  return deadline != nullptr && deadline->Expired() ? 1 : 0;
}

// Refuses every nested open: our input is one stream of bytes and nothing else.
int DenyIoOpen(AVFormatContext*, AVIOContext**, const char*, int, AVDictionary**) {
  return AVERROR(EPERM);
}

}  // namespace

Status DeadlineStatus(const Deadline& deadline) {
  if (deadline.Cancelled()) return CancelledError("media decoding was cancelled");
  return DeadlineExceededError(
      "media decoding took longer than the decode-time limit (max_decode_s = {} s)",
      deadline.limit_s());
}

AvInput::~AvInput() = default;

StatusOr<std::unique_ptr<AvInput>> AvInput::Open(const ByteSource& source,
                                                 const Deadline* deadline) {
  InstallFfmpegLogging();
  std::unique_ptr<AvInput> in(new AvInput());
  in->state_.source = source;
  in->state_.deadline = deadline;

  auto* buffer = static_cast<uint8_t*>(av_malloc(kIoBufferSize));
  if (buffer == nullptr) return ResourceExhaustedError("out of memory opening media");
  in->io_.reset(avio_alloc_context(buffer, kIoBufferSize, /*write_flag=*/0, &in->state_, ReadPacket,
                                   nullptr, Seek));
  if (!in->io_) {
    av_free(buffer);
    return ResourceExhaustedError("out of memory opening media");
  }

  const AVInputFormat* format = nullptr;
  int ret = av_probe_input_buffer2(in->io_.get(), &format, "", nullptr, 0, 0);
  if (deadline != nullptr && deadline->Expired()) return DeadlineStatus(*deadline);
  if (ret < 0 || format == nullptr) {
    if (source.Size() == 0) return InvalidArgumentError("not a media file: it is empty (0 bytes)");
    return InvalidArgumentError("not a media file: no known container or image format");
  }
  if (!DemuxerAllowed(format->name)) {
    return InvalidArgumentError("unsupported container '{}'", format->name);
  }

  AVFormatContext* ctx = avformat_alloc_context();
  if (ctx == nullptr) return ResourceExhaustedError("out of memory opening media");
  ctx->pb = in->io_.get();
  ctx->flags |= AVFMT_FLAG_CUSTOM_IO;
  ctx->interrupt_callback.callback = InterruptCallback;
  ctx->interrupt_callback.opaque = const_cast<Deadline*>(deadline);
  ctx->io_open = DenyIoOpen;
  AVDictionary* options = nullptr;
  av_dict_set(&options, "format_whitelist", kAllowedDemuxers, 0);
  ret = avformat_open_input(&ctx, nullptr, format, &options);  // frees ctx on failure
  av_dict_free(&options);
  if (deadline != nullptr && deadline->Expired()) {
    if (ret >= 0) avformat_close_input(&ctx);
    return DeadlineStatus(*deadline);
  }
  if (ret < 0) {
    return InvalidArgumentError("corrupt or truncated {} file: {}", format->name,
                                AvErrorString(ret));
  }
  in->format_.reset(ctx);

  ret = avformat_find_stream_info(ctx, nullptr);
  if (deadline != nullptr && deadline->Expired()) return DeadlineStatus(*deadline);
  if (ret < 0) {
    return InvalidArgumentError("corrupt or truncated {} file: cannot read stream parameters: {}",
                                format->name, AvErrorString(ret));
  }
  return in;
}

}  // namespace framezip::media::internal
