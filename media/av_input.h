// Opens an FFmpeg demuxer over bytes we control: an in-memory upload or an already-opened file
// descriptor (see file_access.h), through a custom AVIOContext. FFmpeg never sees a path or URL,
// and nested opens (HLS playlists, concat lists, image2 sequences, "file:" references inside a
// container) are refused by an io_open callback and a demuxer allow-list, so a hostile upload
// cannot make us read another file or reach the network. Internal to media/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "media/deadline.h"
#include "media/ffmpeg_handles.h"

namespace framezip::media::internal {

// The bytes to demux: a borrowed buffer, or a file descriptor of `size` bytes (read with pread).
struct ByteSource {
  std::span<const uint8_t> bytes;
  int fd = -1;
  int64_t size = 0;

  int64_t Size() const { return fd >= 0 ? size : static_cast<int64_t>(bytes.size()); }
};

class AvInput {
 public:
  // Probes the container and opens it (avformat_open_input + avformat_find_stream_info).
  // INVALID_ARGUMENT "not a media file" when no demuxer recognizes the bytes, "unsupported
  // container" for demuxers outside the allow-list, "corrupt or truncated <format>" when the
  // format is recognized but its headers cannot be read. DEADLINE_EXCEEDED / CANCELLED via
  // `deadline`, which must outlive this object.
  static StatusOr<std::unique_ptr<AvInput>> Open(const ByteSource& source,
                                                 const Deadline* deadline);

  ~AvInput();
  AvInput(const AvInput&) = delete;
  AvInput& operator=(const AvInput&) = delete;

  AVFormatContext* ctx() const { return format_.get(); }
  // True once a read failed for a reason other than end of data (I/O error, deadline).
  bool read_failed() const { return state_.read_failed; }

  struct IoState {
    ByteSource source;
    int64_t pos = 0;
    const Deadline* deadline = nullptr;
    bool read_failed = false;
  };

 private:
  AvInput() = default;

  // Declared before format_ so it is destroyed after it (FFmpeg may read while closing).
  IoState state_;
  AvIoContextPtr io_;
  AvFormatInputPtr format_;
};

// Status for a libavformat/libavcodec error code hit while reading: deadline/cancel codes become
// DEADLINE_EXCEEDED / CANCELLED naming the limit; anything else INVALID_ARGUMENT with `what`.
Status DeadlineStatus(const Deadline& deadline);

}  // namespace framezip::media::internal
