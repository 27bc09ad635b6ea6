// Demuxes and decodes one video stream and returns the frames shown at given times, seeking so
// that the work grows with the number of frames sampled, not with the length of the video.
//
// Sampling: for each target time (ascending) the decoder decides whether to seek. With an index
// (mp4/mov sample tables, Matroska cues, AVI idx1), it seeks when the keyframe at or before the
// target lies beyond what has been decoded already; without one, when the target is more than a
// few seconds ahead. A seek goes to the keyframe before the target (AVSEEK_FLAG_BACKWARD), then
// decodes forward; if it lands after the target (imprecise demuxers) it backs off and retries,
// and if seeking fails the decoder keeps decoding sequentially. The frame for a target is the
// last one whose presentation time is <= the target (variable frame rate is exact this way).
//
// Internal to media/; the public entry points are in media/media.h.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "media/av_input.h"
#include "media/frame_convert.h"
#include "media/image_view.h"
#include "media/media_types.h"

namespace framezip::media::internal {

class VideoDecoder {
 public:
  // Opens the container and the decoder and reads the metadata (no frame is decoded beyond what
  // FFmpeg's stream probing does). Enforces the resolution and duration limits. Errors:
  // INVALID_ARGUMENT "no video stream", "unsupported video codec 'x'", and those of AvInput.
  static StatusOr<std::unique_ptr<VideoDecoder>> Open(const ByteSource& source,
                                                      const MediaLimits& limits,
                                                      const Deadline* deadline);
  ~VideoDecoder();

  // kind, mime_type (from the container), container, codec, pixel format, sizes, rotation,
  // duration, fps, frame count, has_audio. size_bytes and content_hash are left for the caller.
  const MediaInfo& info() const { return info_; }

  // Called once per target, in target order, with the upright RGB frame and its presentation
  // time in seconds from the stream start. The view is valid during the call only.
  using FrameSink = std::function<Status(size_t target_index, const ImageView& rgb, double time_s)>;

  // `targets_s` ascending, in seconds from the stream start. INVALID_ARGUMENT "truncated or
  // corrupt at T s" when the data ends before a target that the container promised.
  Status Sample(const std::vector<double>& targets_s, const FrameSink& sink);

  // Decodes every frame from the current position to the end without converting it (the
  // sequential-decode benchmark). Returns the number of frames.
  StatusOr<int64_t> DecodeAll();

  using Stats = DecodedMedia::Stats;
  const Stats& stats() const { return stats_; }

 private:
  VideoDecoder(const MediaLimits& limits, const Deadline* deadline);

  Status OpenStreams(const ByteSource& source);
  Status ScanDuration();
  StatusOr<bool> NextFrame(AVFrame* frame);
  double FrameTime(const AVFrame& frame);
  bool ShouldSeek(double target_s, double decoded_until_s) const;
  std::optional<double> KeyframeBefore(double target_s) const;
  StatusOr<bool> SeekTo(double time_s);
  Status Emit(size_t index, const AVFrame& frame, int64_t frame_id, double time_s,
              const FrameSink& sink);
  Status FinishAtEnd(const std::vector<double>& targets, size_t next, const AVFrame* last,
                     int64_t last_id, double last_time, const FrameSink& sink);
  Status CheckFrameSize(int width, int height) const;

  MediaLimits limits_;
  const Deadline* deadline_;
  MediaInfo info_;

  std::unique_ptr<AvInput> input_;
  AvCodecContextPtr codec_;
  AvPacketPtr packet_;
  std::unique_ptr<RgbConverter> converter_;
  int stream_index_ = -1;
  AVRational time_base_{1, 1};
  int64_t start_pts_ = 0;
  bool has_index_ = false;
  bool seekable_ = true;
  double last_seek_keyframe_s_ = -1e300;  // keyframe time of the latest seek

  // Demux/decode state.
  bool demux_eof_ = false;
  bool draining_ = false;
  bool read_error_ = false;
  int consecutive_read_errors_ = 0;
  int consecutive_decode_errors_ = 0;
  int last_error_ = 0;
  double last_packet_time_ = 0.0;  // start of the last packet read, any stream (s)
  double data_end_ = 0.0;          // end of the latest packet read, any stream (s)
  double last_frame_time_ = 0.0;   // for frames without timestamps
  int64_t converted_id_ = -1;      // frame id whose RGB the converter holds
  ImageView converted_{};
  Stats stats_;
};

}  // namespace framezip::media::internal
