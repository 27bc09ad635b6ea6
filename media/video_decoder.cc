#include "media/video_decoder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

extern "C" {
#include <libavutil/pixdesc.h>
}

namespace framezip::media::internal {
namespace {

// Two timestamps closer than this are the same instant (timestamps round-trip through time
// bases as coarse as 1/90000 s).
constexpr double kEps = 1e-6;
// Without an index a seek is a guess; only jump when the target is this far ahead.
constexpr double kSeekGapWithoutIndexS = 4.0;
// A run of this many undecodable packets with no frame in between means the stream is garbage.
constexpr int kMaxConsecutiveDecodeErrors = 200;
constexpr int kMaxConsecutiveReadErrors = 32;

double Seconds(int64_t ts, AVRational tb) { return static_cast<double>(ts) * av_q2d(tb); }

std::string MimeForDemuxer(const char* name) {
  const std::string n = name ? name : "";
  if (n.starts_with("mov,")) return "video/mp4";
  if (n.starts_with("matroska")) return "video/x-matroska";
  if (n == "avi") return "video/x-msvideo";
  if (n == "gif") return "image/gif";
  if (n == "mpegts") return "video/mp2t";
  if (n == "flv") return "video/x-flv";
  if (n == "ogg") return "video/ogg";
  if (n == "asf") return "video/x-ms-asf";
  return "application/octet-stream";
}

int DecodeThreads(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hw == 0 ? 1u : hw, 1u, 8u));
}

}  // namespace

VideoDecoder::VideoDecoder(const MediaLimits& limits, const Deadline* deadline)
    : limits_(limits), deadline_(deadline) {}

VideoDecoder::~VideoDecoder() = default;

StatusOr<std::unique_ptr<VideoDecoder>> VideoDecoder::Open(const ByteSource& source,
                                                           const MediaLimits& limits,
                                                           const Deadline* deadline) {
  std::unique_ptr<VideoDecoder> d(new VideoDecoder(limits, deadline));
  FZ_RETURN_IF_ERROR(d->OpenStreams(source));
  if (!(d->info_.duration_s > 0)) {
    // No usable duration in the headers (raw streams, some GIFs and AVIs): read the packets once
    // (no decoding) to measure it, then start again from the beginning.
    FZ_RETURN_IF_ERROR(d->ScanDuration());
    const MediaInfo scanned = d->info_;
    d.reset(new VideoDecoder(limits, deadline));
    FZ_RETURN_IF_ERROR(d->OpenStreams(source));
    d->info_.duration_s = scanned.duration_s;
    d->info_.frame_count = scanned.frame_count;
    if (!(d->info_.fps > 0) && scanned.duration_s > 0 && scanned.frame_count > 1) {
      d->info_.fps = static_cast<double>(scanned.frame_count) / scanned.duration_s;
    }
  }
  if (d->info_.duration_s > limits.max_duration_s) {
    return ResourceExhaustedError("video is {:.1f} s long; the limit is {:.1f} s (max_duration_s)",
                                  d->info_.duration_s, limits.max_duration_s);
  }
  if (d->info_.frame_count <= 0 && d->info_.fps > 0) {
    d->info_.frame_count = std::max<int64_t>(1, std::llround(d->info_.duration_s * d->info_.fps));
  }
  return d;
}

Status VideoDecoder::CheckFrameSize(int width, int height) const {
  if (width > limits_.max_width || height > limits_.max_height) {
    return ResourceExhaustedError(
        "video frames are {}x{}; the limit is {}x{} (max_width x max_height)", width, height,
        limits_.max_width, limits_.max_height);
  }
  return absl::OkStatus();
}

Status VideoDecoder::OpenStreams(const ByteSource& source) {
  FZ_ASSIGN_OR_RETURN(input_, AvInput::Open(source, deadline_));
  AVFormatContext* fmt = input_->ctx();

  int64_t best_area = -1;
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const AVStream* st = fmt->streams[i];
    const AVCodecParameters* par = st->codecpar;
    if (par->codec_type == AVMEDIA_TYPE_AUDIO) info_.has_audio = true;
    // Cover art in music files is a "video" stream of one picture: not a video.
    if (par->codec_type != AVMEDIA_TYPE_VIDEO || (st->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
      continue;
    }
    const int64_t area = int64_t{par->width} * par->height;
    if (area > best_area) {
      best_area = area;
      stream_index_ = static_cast<int>(i);
    }
  }
  if (stream_index_ < 0) {
    return InvalidArgumentError("no video stream in this {} file{}", fmt->iformat->name,
                                info_.has_audio ? " (it has audio only)" : "");
  }
  AVStream* st = fmt->streams[stream_index_];
  const AVCodecParameters* par = st->codecpar;
  FZ_RETURN_IF_ERROR(CheckFrameSize(par->width, par->height));

  const AVCodec* decoder = nullptr;
  if (par->codec_id == AV_CODEC_ID_AV1) {
    // FFmpeg's native AV1 decoder needs a hardware accelerator; dav1d is the software one.
    decoder = avcodec_find_decoder_by_name("libdav1d");
    if (decoder == nullptr) decoder = avcodec_find_decoder_by_name("libaom-av1");
  }
  if (decoder == nullptr) decoder = avcodec_find_decoder(par->codec_id);
  if (decoder == nullptr) {
    return InvalidArgumentError("unsupported video codec '{}': this build has no decoder for it",
                                avcodec_get_name(par->codec_id));
  }
  codec_.reset(avcodec_alloc_context3(decoder));
  if (!codec_) return ResourceExhaustedError("out of memory creating a video decoder");
  int ret = avcodec_parameters_to_context(codec_.get(), par);
  if (ret < 0) {
    return InvalidArgumentError("invalid '{}' stream parameters: {}", decoder->name,
                                AvErrorString(ret));
  }
  codec_->pkt_timebase = st->time_base;
  codec_->thread_count = DecodeThreads(limits_.decode_threads);
  codec_->thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE;
  ret = avcodec_open2(codec_.get(), decoder, nullptr);
  if (ret < 0) {
    return InvalidArgumentError("cannot open the '{}' decoder for this stream: {}", decoder->name,
                                AvErrorString(ret));
  }
  packet_.reset(av_packet_alloc());
  if (!packet_) return ResourceExhaustedError("out of memory allocating a packet");

  // Skip streams we never look at, except audio, whose packets tell where the data really ends.
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const auto type = fmt->streams[i]->codecpar->codec_type;
    if (static_cast<int>(i) != stream_index_ && type != AVMEDIA_TYPE_AUDIO) {
      fmt->streams[i]->discard = AVDISCARD_ALL;
    }
  }

  time_base_ = st->time_base;
  start_pts_ = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
  has_index_ = avformat_index_get_entries_count(st) > 0;
  seekable_ = (fmt->iformat->flags & AVFMT_NOBINSEARCH) == 0 || has_index_ ||
              fmt->iformat->read_seek != nullptr;

  const int rotation = StreamRotationDegrees(*st);
  converter_ = std::make_unique<RgbConverter>(rotation);

  info_.kind = MediaKind::kVideo;
  info_.container = fmt->iformat->name;
  info_.mime_type = MimeForDemuxer(fmt->iformat->name);
  if (info_.container == "matroska,webm") {
    // The demuxer serves both; the codec tells which one the file is in practice.
    const bool webm = par->codec_id == AV_CODEC_ID_VP8 || par->codec_id == AV_CODEC_ID_VP9 ||
                      par->codec_id == AV_CODEC_ID_AV1;
    info_.mime_type = webm ? "video/webm" : "video/x-matroska";
  }
  info_.codec = avcodec_get_name(par->codec_id);
  const char* pix = av_get_pix_fmt_name(static_cast<AVPixelFormat>(par->format));
  info_.pixel_format = pix ? pix : "unknown";
  info_.coded_width = par->width;
  info_.coded_height = par->height;
  info_.rotation_degrees = rotation;
  const bool swap = rotation == 90 || rotation == 270;
  info_.width = swap ? par->height : par->width;
  info_.height = swap ? par->width : par->height;

  const AVRational rate = av_guess_frame_rate(fmt, st, nullptr);
  if (rate.num > 0 && rate.den > 0) {
    const double fps = av_q2d(rate);
    if (fps > 0 && fps <= 1000) info_.fps = fps;
  }
  double duration = 0;
  if (st->duration != AV_NOPTS_VALUE && st->duration > 0) {
    duration = Seconds(st->duration, st->time_base);
  } else if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0 &&
             fmt->duration_estimation_method != AVFMT_DURATION_FROM_BITRATE) {
    duration = static_cast<double>(fmt->duration) / AV_TIME_BASE;
  }
  info_.duration_s = std::isfinite(duration) ? duration : 0.0;
  info_.frame_count = st->nb_frames > 0 ? st->nb_frames : 0;
  return absl::OkStatus();
}

Status VideoDecoder::ScanDuration() {
  AVFormatContext* fmt = input_->ctx();
  int64_t packets = 0;
  double end = 0;
  int errors = 0;
  for (;;) {
    if (deadline_ != nullptr && deadline_->Expired()) return DeadlineStatus(*deadline_);
    const int ret = av_read_frame(fmt, packet_.get());
    if (ret < 0) {
      if (ret == AVERROR_EXIT && deadline_ != nullptr) return DeadlineStatus(*deadline_);
      if (ret == AVERROR_EOF || avio_feof(fmt->pb) || ++errors > kMaxConsecutiveReadErrors) break;
      continue;
    }
    errors = 0;
    if (packet_->stream_index == stream_index_) {
      ++packets;
      const int64_t ts = packet_->pts != AV_NOPTS_VALUE ? packet_->pts : packet_->dts;
      if (ts != AV_NOPTS_VALUE) {
        end = std::max(
            end, Seconds(ts - start_pts_ + std::max<int64_t>(packet_->duration, 0), time_base_));
      }
    }
    av_packet_unref(packet_.get());
  }
  if (packets == 0) {
    return InvalidArgumentError("corrupt {} file: its video stream has no packets",
                                info_.container);
  }
  if (!(end > 0) && info_.fps > 0) end = static_cast<double>(packets) / info_.fps;
  info_.duration_s = std::isfinite(end) ? end : 0.0;
  info_.frame_count = packets;
  return absl::OkStatus();
}

double VideoDecoder::FrameTime(const AVFrame& frame) {
  int64_t pts = frame.best_effort_timestamp;
  if (pts == AV_NOPTS_VALUE) pts = frame.pts;
  if (pts == AV_NOPTS_VALUE) {
    // No timestamp at all: assume a constant rate after the previous frame.
    last_frame_time_ += info_.fps > 0 ? 1.0 / info_.fps : 0.04;
    return last_frame_time_;
  }
  last_frame_time_ = Seconds(pts - start_pts_, time_base_);
  return last_frame_time_;
}

StatusOr<bool> VideoDecoder::NextFrame(AVFrame* frame) {
  AVFormatContext* fmt = input_->ctx();
  for (;;) {
    if (deadline_ != nullptr && deadline_->Expired()) return DeadlineStatus(*deadline_);
    int ret = avcodec_receive_frame(codec_.get(), frame);
    if (ret == 0) {
      ++stats_.frames_decoded;
      consecutive_decode_errors_ = 0;
      FZ_RETURN_IF_ERROR(CheckFrameSize(frame->width, frame->height));
      return true;
    }
    if (ret == AVERROR_EOF) return false;
    if (ret != AVERROR(EAGAIN)) {
      ++stats_.decode_errors;
      last_error_ = ret;
      if (draining_) return false;
      // A decoder stuck returning errors must not spin until the deadline.
      if (++consecutive_decode_errors_ > kMaxConsecutiveDecodeErrors) {
        return InvalidArgumentError("corrupt {} stream at {:.2f} s: the decoder keeps failing ({})",
                                    info_.codec, last_packet_time_, AvErrorString(ret));
      }
      continue;
    }
    if (draining_) return false;
    if (demux_eof_) {
      avcodec_send_packet(codec_.get(), nullptr);
      draining_ = true;
      continue;
    }
    ret = av_read_frame(fmt, packet_.get());
    if (ret < 0) {
      if (deadline_ != nullptr && deadline_->Expired()) return DeadlineStatus(*deadline_);
      if (ret != AVERROR_EOF) {
        read_error_ = true;
        last_error_ = ret;
        if (!avio_feof(fmt->pb) && ++consecutive_read_errors_ <= kMaxConsecutiveReadErrors) {
          continue;
        }
      }
      demux_eof_ = true;
      continue;
    }
    consecutive_read_errors_ = 0;
    const AVStream* st = fmt->streams[packet_->stream_index];
    const int64_t ts = packet_->pts != AV_NOPTS_VALUE ? packet_->pts : packet_->dts;
    if (ts != AV_NOPTS_VALUE) {
      const int64_t start = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
      const double t = Seconds(ts - start, st->time_base);
      const double end = t + Seconds(std::max<int64_t>(packet_->duration, 0), st->time_base);
      if (std::isfinite(end)) {
        last_packet_time_ = t;
        data_end_ = std::max(data_end_, end);
      }
    }
    if (packet_->stream_index != stream_index_) {
      av_packet_unref(packet_.get());
      continue;
    }
    ++stats_.packets;
    ret = avcodec_send_packet(codec_.get(), packet_.get());
    av_packet_unref(packet_.get());
    if (ret < 0 && ret != AVERROR(EAGAIN)) {
      ++stats_.decode_errors;
      last_error_ = ret;
      if (++consecutive_decode_errors_ > kMaxConsecutiveDecodeErrors) {
        return InvalidArgumentError(
            "corrupt {} stream at {:.2f} s: {} packets in a row could not be decoded ({})",
            info_.codec, last_packet_time_, consecutive_decode_errors_, AvErrorString(ret));
      }
    }
  }
}

std::optional<double> VideoDecoder::KeyframeBefore(double target_s) const {
  if (!has_index_) return std::nullopt;
  AVStream* st = input_->ctx()->streams[stream_index_];
  const int64_t ts = start_pts_ + static_cast<int64_t>(std::floor(target_s / av_q2d(time_base_)));
  const AVIndexEntry* entry = avformat_index_get_entry_from_timestamp(st, ts, AVSEEK_FLAG_BACKWARD);
  if (entry == nullptr) return std::nullopt;
  return Seconds(entry->timestamp - start_pts_, time_base_);
}

bool VideoDecoder::ShouldSeek(double target_s, double decoded_until_s) const {
  if (!seekable_ || target_s <= decoded_until_s + kEps) return false;
  // Where decoding would resume: after what was decoded, or at the keyframe last sought to
  // (a seek is never repeated to reach the same keyframe, whatever the index says).
  const double position = std::max(decoded_until_s, last_seek_keyframe_s_);
  if (has_index_) {
    const std::optional<double> keyframe = KeyframeBefore(target_s);
    return keyframe.has_value() && *keyframe > position + kEps;
  }
  return target_s - position > kSeekGapWithoutIndexS;
}

StatusOr<bool> VideoDecoder::SeekTo(double time_s) {
  last_seek_keyframe_s_ = KeyframeBefore(time_s).value_or(time_s);
  const int64_t ts = start_pts_ + static_cast<int64_t>(std::floor(time_s / av_q2d(time_base_)));
  const int ret = av_seek_frame(input_->ctx(), stream_index_, ts, AVSEEK_FLAG_BACKWARD);
  if (deadline_ != nullptr && deadline_->Expired()) return DeadlineStatus(*deadline_);
  if (ret < 0) {
    seekable_ = false;  // keep decoding sequentially from where we are
    return false;
  }
  avcodec_flush_buffers(codec_.get());
  demux_eof_ = false;
  draining_ = false;
  consecutive_read_errors_ = 0;
  ++stats_.seeks;
  return true;
}

Status VideoDecoder::Emit(size_t index, const AVFrame& frame, int64_t frame_id, double time_s,
                          const FrameSink& sink) {
  if (converted_id_ != frame_id) {
    FZ_ASSIGN_OR_RETURN(converted_, converter_->Convert(frame));
    converted_id_ = frame_id;
  }
  return sink(index, converted_, time_s);
}

Status VideoDecoder::FinishAtEnd(const std::vector<double>& targets, size_t next,
                                 const AVFrame* last, int64_t last_id, double last_time,
                                 const FrameSink& sink) {
  const double interval = info_.fps > 0 ? 1.0 / info_.fps : 0.1;
  const double slack = std::max(2 * interval, 0.25);
  // The data ended early if reading failed or the packets stop well before the declared end.
  const bool ended_early =
      read_error_ || input_->read_failed() || data_end_ + slack < info_.duration_s;
  if (last == nullptr) {
    if (stats_.frames_decoded == 0 && ended_early) {
      return InvalidArgumentError(
          "video is truncated or corrupt at {:.2f} s: no frame could be decoded before the data "
          "ends, but the file declares {:.2f} s",
          data_end_, info_.duration_s);
    }
    if (stats_.frames_decoded == 0) {
      return InvalidArgumentError("corrupt {} stream: no frame could be decoded{}", info_.codec,
                                  last_error_ != 0 ? " (" + AvErrorString(last_error_) + ")" : "");
    }
    return InvalidArgumentError(
        "video is truncated or corrupt at {:.2f} s: no decodable frame after it, but the file "
        "declares {:.2f} s",
        last_frame_time_, info_.duration_s);
  }
  for (size_t i = next; i < targets.size(); ++i) {
    if (ended_early && targets[i] > last_time + slack) {
      return InvalidArgumentError(
          "video is truncated or corrupt at {:.2f} s: the data ends there, but the file declares "
          "{:.2f} s",
          std::max(last_time, data_end_), info_.duration_s);
    }
    FZ_RETURN_IF_ERROR(Emit(i, *last, last_id, last_time, sink));
  }
  return absl::OkStatus();
}

Status VideoDecoder::Sample(const std::vector<double>& targets, const FrameSink& sink) {
  AvFramePtr frame(av_frame_alloc());
  AvFramePtr prev(av_frame_alloc());
  if (!frame || !prev) return ResourceExhaustedError("out of memory allocating frames");
  bool have_prev = false;
  double prev_time = 0.0;
  int64_t prev_id = -1;
  double decoded_until = 0.0;  // nothing decoded yet: the demuxer sits at the start
  size_t next = 0;
  size_t backed_off_for = targets.size();  // the target a backed-off seek is decoding towards

  while (next < targets.size()) {
    const double target = targets[next];
    bool just_seeked = false;
    if (next != backed_off_for && ShouldSeek(target, have_prev ? prev_time : decoded_until)) {
      FZ_ASSIGN_OR_RETURN(just_seeked, SeekTo(target));
      if (just_seeked) have_prev = false;
    }
    double backoff = 1.0;
    for (;;) {
      FZ_ASSIGN_OR_RETURN(const bool got, NextFrame(frame.get()));
      if (!got) {
        return FinishAtEnd(targets, next, have_prev ? prev.get() : nullptr, prev_id, prev_time,
                           sink);
      }
      const int64_t id = stats_.frames_decoded;
      const double t = FrameTime(*frame);
      if (just_seeked && !have_prev && t > target + kEps && target > 0 && backoff <= 64) {
        // Landed after the target (the demuxer's keyframe was late): seek earlier and retry.
        FZ_ASSIGN_OR_RETURN(just_seeked, SeekTo(std::max(0.0, target - backoff)));
        backoff *= 2;
        backed_off_for = next;  // from here decode forward to this target, no more seeks
        av_frame_unref(frame.get());
        if (just_seeked) continue;
      }
      just_seeked = false;
      while (next < targets.size() && targets[next] + kEps < t) {
        // The previous frame is the one on screen at this target (or, before the first frame
        // of the stream, the first frame).
        if (have_prev) {
          FZ_RETURN_IF_ERROR(Emit(next, *prev, prev_id, prev_time, sink));
        } else {
          FZ_RETURN_IF_ERROR(Emit(next, *frame, id, t, sink));
        }
        ++next;
      }
      av_frame_unref(prev.get());
      av_frame_move_ref(prev.get(), frame.get());
      have_prev = true;
      prev_time = t;
      prev_id = id;
      decoded_until = t;
      if (next >= targets.size() ||
          (next != backed_off_for && ShouldSeek(targets[next], prev_time))) {
        break;
      }
    }
  }
  return absl::OkStatus();
}

StatusOr<int64_t> VideoDecoder::DecodeAll() {
  AvFramePtr frame(av_frame_alloc());
  if (!frame) return ResourceExhaustedError("out of memory allocating a frame");
  int64_t count = 0;
  for (;;) {
    FZ_ASSIGN_OR_RETURN(const bool got, NextFrame(frame.get()));
    if (!got) break;
    ++count;
    av_frame_unref(frame.get());
  }
  if (count == 0) {
    return InvalidArgumentError("corrupt {} stream: no frame could be decoded", info_.codec);
  }
  return count;
}

}  // namespace framezip::media::internal
