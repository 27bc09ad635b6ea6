// RAII for every FFmpeg handle the media stage uses (docs/DEVELOPING.md §4): unique_ptr with
// deleter structs, as ggml-cpp.h does for ggml's handles. Internal to media/.
#pragma once

#include <memory>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace framezip::media::internal {

struct AvFormatInputDeleter {
  void operator()(AVFormatContext* ctx) const { avformat_close_input(&ctx); }
};
struct AvCodecContextDeleter {
  void operator()(AVCodecContext* ctx) const { avcodec_free_context(&ctx); }
};
struct AvFrameDeleter {
  void operator()(AVFrame* frame) const { av_frame_free(&frame); }
};
struct AvPacketDeleter {
  void operator()(AVPacket* packet) const { av_packet_free(&packet); }
};
struct SwsContextDeleter {
  void operator()(SwsContext* ctx) const { sws_freeContext(ctx); }
};
// A custom AVIOContext owns its buffer separately (FFmpeg may have replaced it), so free both.
struct AvIoContextDeleter {
  void operator()(AVIOContext* ctx) const {
    if (ctx == nullptr) return;
    av_freep(&ctx->buffer);
    avio_context_free(&ctx);
  }
};

using AvFormatInputPtr = std::unique_ptr<AVFormatContext, AvFormatInputDeleter>;
using AvCodecContextPtr = std::unique_ptr<AVCodecContext, AvCodecContextDeleter>;
using AvFramePtr = std::unique_ptr<AVFrame, AvFrameDeleter>;
using AvPacketPtr = std::unique_ptr<AVPacket, AvPacketDeleter>;
using SwsContextPtr = std::unique_ptr<SwsContext, SwsContextDeleter>;
using AvIoContextPtr = std::unique_ptr<AVIOContext, AvIoContextDeleter>;

// "Invalid data found when processing input" for AVERROR_INVALIDDATA, etc.
std::string AvErrorString(int error);

// Routes FFmpeg's own log lines to framezip's logger at debug level (once per process): a server
// must not have a library writing to its stderr, and the fuzzer must stay quiet.
void InstallFfmpegLogging();

}  // namespace framezip::media::internal
