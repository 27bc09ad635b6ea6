#include "media/media.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "media/anyres_tiles.h"
#include "media/av_input.h"
#include "media/deadline.h"
#include "media/file_access.h"
#include "media/frame_sampling.h"
#include "media/image_decoder.h"
#include "media/preprocess.h"
#include "media/raw_frames.h"
#include "media/video_decoder.h"

namespace framezip::media {
namespace {

using internal::ByteSource;
using internal::Deadline;

// The media's bytes, in memory or behind a verified file descriptor.
struct OpenedSource {
  ByteSource bytes;
  std::optional<OpenedFile> file;
  int64_t size = 0;
};

StatusOr<OpenedSource> OpenSource(const MediaSource& source, const MediaLimits& limits) {
  OpenedSource out;
  if (source.kind == MediaSource::Kind::kFd) {
    struct stat st {};
    if (source.fd < 0 || ::fstat(source.fd, &st) != 0) {
      return InvalidArgumentError("the media descriptor cannot be read");
    }
    if (!S_ISREG(st.st_mode)) {
      return FailedPreconditionError("the media descriptor is not a regular file");
    }
    out.size = st.st_size;
    out.bytes.fd = source.fd;
    out.bytes.size = st.st_size;
  } else if (source.kind == MediaSource::Kind::kFile) {
    FZ_ASSIGN_OR_RETURN(OpenedFile file, OpenUnderRoot(source.root, source.path));
    out.size = file.size_bytes;
    out.bytes.fd = file.fd.get();
    out.bytes.size = file.size_bytes;
    out.file = std::move(file);
  } else {
    out.bytes.bytes = source.bytes;
    out.size = static_cast<int64_t>(source.bytes.size());
  }
  if (out.size > limits.max_bytes) {
    return ResourceExhaustedError("media is {} bytes; the limit is {} bytes (max_bytes)", out.size,
                                  limits.max_bytes);
  }
  if (out.size == 0) return InvalidArgumentError("not a media file: it is empty (0 bytes)");
  return out;
}

// Reads [offset, offset + length) of the source.
StatusOr<std::vector<uint8_t>> ReadRange(const OpenedSource& src, int64_t offset, int64_t length) {
  length = std::max<int64_t>(0, std::min(length, src.size - offset));
  std::vector<uint8_t> buf(static_cast<size_t>(length));
  if (src.bytes.fd < 0) {
    std::copy_n(src.bytes.bytes.data() + offset, length, buf.data());
    return buf;
  }
  int64_t done = 0;
  while (done < length) {
    const ssize_t got =
        ::pread(src.bytes.fd, buf.data() + done, static_cast<size_t>(length - done), offset + done);
    if (got < 0) return UnavailableError("reading the media file failed");
    if (got == 0) break;
    done += got;
  }
  buf.resize(static_cast<size_t>(done));
  return buf;
}

StatusOr<ContentHash> Hash(const OpenedSource& src, const DecodeOptions& options,
                           const Deadline& deadline) {
  if (options.known_content_hash) return *options.known_content_hash;
  if (src.bytes.fd < 0) return HashBytes(src.bytes.bytes);
  ContentHasher hasher;
  constexpr int64_t kChunk = 4 << 20;
  for (int64_t offset = 0; offset < src.size; offset += kChunk) {
    if (deadline.Expired()) return internal::DeadlineStatus(deadline);
    FZ_ASSIGN_OR_RETURN(const std::vector<uint8_t> chunk, ReadRange(src, offset, kChunk));
    if (chunk.empty()) break;
    hasher.Update(chunk);
  }
  return hasher.Finish();
}

// The whole source in memory for OpenCV: a borrowed span for bytes, a read for files.
struct ImageBytes {
  std::vector<uint8_t> owned;
  std::span<const uint8_t> view;
};
StatusOr<ImageBytes> LoadImageBytes(const OpenedSource& src) {
  ImageBytes out;
  if (src.bytes.fd < 0) {
    out.view = src.bytes.bytes;
    return out;
  }
  FZ_ASSIGN_OR_RETURN(out.owned, ReadRange(src, 0, src.size));
  out.view = out.owned;
  return out;
}

MediaInfo ImageInfo(const SniffResult& sniff, int width, int height) {
  MediaInfo info;
  info.kind = MediaKind::kImage;
  info.mime_type = sniff.mime_type;
  info.container = internal::ImageFormatName(sniff.type);
  info.codec = info.container;
  for (char& c : info.codec) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  info.pixel_format = "rgb24";
  info.width = info.coded_width = width;
  info.height = info.coded_height = height;
  info.frame_count = 1;
  return info;
}

Status CheckOutputSize(int64_t frames, int height, int width, const MediaLimits& limits) {
  const int64_t bytes = frames * 3 * int64_t{height} * width * static_cast<int64_t>(sizeof(float));
  if (bytes > limits.max_output_bytes) {
    return ResourceExhaustedError(
        "{} preprocessed frames of 3x{}x{} would take {} bytes; the limit is {} bytes "
        "(max_output_bytes)",
        frames, height, width, bytes, limits.max_output_bytes);
  }
  return absl::OkStatus();
}

// Raw frames (media/raw_frames.h): the header, checked against the limits a decoded video is held
// to, and the file's size against it. No codec is involved: frames are read as stored.
struct RawSource {
  RawFrames frames;
  int64_t pixels_offset = 0;
};

StatusOr<RawSource> OpenRawFrames(const OpenedSource& src, const MediaLimits& limits) {
  RawSource raw;
  FZ_ASSIGN_OR_RETURN(const std::vector<uint8_t> fixed,
                      ReadRange(src, 0, static_cast<int64_t>(kRawFramesFixedHeaderBytes)));
  FZ_ASSIGN_OR_RETURN(raw.frames, ParseRawFramesFixedHeader(fixed));
  RawFrames& f = raw.frames;
  const RawFrameLimits raw_limits{.max_width = limits.max_width,
                                  .max_height = limits.max_height,
                                  .max_duration_s = limits.max_duration_s};
  // Bounded before the timestamps are read: the header's count is the file's word.
  if (f.frame_count < 1 || f.frame_count > raw_limits.max_frames) {
    return InvalidArgumentError("raw frames.frame_count: {} is not in [1, {}]", f.frame_count,
                                raw_limits.max_frames);
  }
  const auto header = static_cast<int64_t>(kRawFramesFixedHeaderBytes);
  FZ_ASSIGN_OR_RETURN(const std::vector<uint8_t> timestamps,
                      ReadRange(src, header, 8 * f.frame_count));
  FZ_RETURN_IF_ERROR(ParseRawFramesTimestamps(timestamps, f));
  FZ_RETURN_IF_ERROR(CheckRawFrames(f, raw_limits, "raw frames"));
  raw.pixels_offset = header + 8 * f.frame_count;
  const uint64_t pixel_bytes = RawFramesPixelBytes(f);
  if (static_cast<uint64_t>(src.size - raw.pixels_offset) != pixel_bytes) {
    return InvalidArgumentError(
        "raw frames: {} pixel bytes follow the header, which declares {} (stride_bytes * height "
        "* frame_count)",
        src.size - raw.pixels_offset, pixel_bytes);
  }
  return raw;
}

MediaInfo RawFramesInfo(const RawFrames& f) {
  MediaInfo info;
  info.kind = MediaKind::kVideo;
  info.mime_type = kRawFramesMimeType;
  info.container = kRawFramesContainer;
  info.codec = kRawFramesCodec;
  info.pixel_format = "rgb24";
  info.width = info.coded_width = static_cast<int>(f.width);
  info.height = info.coded_height = static_cast<int>(f.height);
  info.duration_s = static_cast<double>(ResolvedDurationUs(f)) / 1e6;
  info.fps = static_cast<double>(f.frame_count) / info.duration_s;
  info.frame_count = f.frame_count;
  return info;
}

// Calls `sink` for each target with the frame shown then (RawFrameAt), reading only those frames.
Status SampleRawFrames(const OpenedSource& src, const RawSource& raw,
                       const std::vector<double>& targets_s, const Deadline& deadline,
                       const internal::VideoDecoder::FrameSink& sink, DecodedMedia::Stats* stats) {
  const RawFrames& f = raw.frames;
  const auto row_bytes = static_cast<size_t>(3 * f.width);
  const auto stride = static_cast<size_t>(f.stride_bytes);
  const auto height = static_cast<size_t>(f.height);
  std::vector<uint8_t> packed;  // the frame's pixel rows, padding dropped (descriptor sources)
  size_t loaded = SIZE_MAX;
  ImageView view{nullptr, static_cast<int>(f.width), static_cast<int>(f.height), stride};
  for (size_t i = 0; i < targets_s.size(); ++i) {
    if (deadline.Expired()) return internal::DeadlineStatus(deadline);
    const size_t index = RawFrameAt(f, targets_s[i] * 1e6);
    if (index != loaded) {
      const int64_t frame_offset =
          raw.pixels_offset + static_cast<int64_t>(index * stride * height);
      if (src.bytes.fd < 0) {
        view.data = src.bytes.bytes.data() + frame_offset;
      } else if (stride == row_bytes) {
        FZ_ASSIGN_OR_RETURN(packed,
                            ReadRange(src, frame_offset, static_cast<int64_t>(row_bytes * height)));
        if (packed.size() != row_bytes * height) {
          return UnavailableError("reading the media file failed");
        }
        view.data = packed.data();
      } else {
        packed.resize(row_bytes * height);
        for (size_t y = 0; y < height; ++y) {
          FZ_ASSIGN_OR_RETURN(const std::vector<uint8_t> row,
                              ReadRange(src, frame_offset + static_cast<int64_t>(y * stride),
                                        static_cast<int64_t>(row_bytes)));
          if (row.size() != row_bytes) return UnavailableError("reading the media file failed");
          std::copy(row.begin(), row.end(), packed.begin() + static_cast<ptrdiff_t>(y * row_bytes));
        }
        view.data = packed.data();
        view.stride = row_bytes;
      }
      loaded = index;
      ++stats->frames_decoded;
    }
    FZ_RETURN_IF_ERROR(sink(i, view, static_cast<double>(f.timestamps_us[index]) / 1e6));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<MediaInfo> ProbeMedia(const MediaSource& source, const MediaLimits& limits,
                               const DecodeOptions& options) {
  const Deadline deadline(limits.max_decode_s, options.cancel);
  FZ_ASSIGN_OR_RETURN(const OpenedSource src, OpenSource(source, limits));
  FZ_ASSIGN_OR_RETURN(const std::vector<uint8_t> head, ReadRange(src, 0, 64 * 1024));
  const SniffResult sniff = SniffMedia(head);
  MediaInfo info;
  if (HasRawFramesMagic(head)) {
    FZ_ASSIGN_OR_RETURN(const RawSource raw, OpenRawFrames(src, limits));
    info = RawFramesInfo(raw.frames);
  } else if (sniff.is_still_image) {
    if (sniff.animated) {
      return InvalidArgumentError(
          "animated WebP is not supported: send it as a video (mp4, webm, gif) or a still image");
    }
    if (sniff.width <= 0 || sniff.height <= 0) {
      return InvalidArgumentError("corrupt or truncated {} image: its header has no valid size",
                                  internal::ImageFormatName(sniff.type));
    }
    if (sniff.width > limits.max_width || sniff.height > limits.max_height) {
      return ResourceExhaustedError("image is {}x{}; the limit is {}x{} (max_width x max_height)",
                                    sniff.width, sniff.height, limits.max_width, limits.max_height);
    }
    info = ImageInfo(sniff, sniff.width, sniff.height);
  } else {
    FZ_ASSIGN_OR_RETURN(auto decoder, internal::VideoDecoder::Open(src.bytes, limits, &deadline));
    info = decoder->info();
    if (!sniff.mime_type.empty()) info.mime_type = sniff.mime_type;
  }
  info.size_bytes = src.size;
  FZ_ASSIGN_OR_RETURN(info.content_hash, Hash(src, options, deadline));
  return info;
}

StatusOr<DecodedMedia> DecodeMedia(const MediaSource& source, const FrameSamplingSpec& sampling,
                                   const PreprocessSpec& preprocess, const MediaLimits& limits,
                                   const DecodeOptions& options) {
  FZ_RETURN_IF_ERROR(ValidateSamplingSpec(sampling, limits));
  FZ_RETURN_IF_ERROR(ValidatePreprocessSpec(preprocess));
  const Deadline deadline(limits.max_decode_s, options.cancel);
  FZ_ASSIGN_OR_RETURN(const OpenedSource src, OpenSource(source, limits));
  FZ_ASSIGN_OR_RETURN(const std::vector<uint8_t> head, ReadRange(src, 0, 64 * 1024));
  const SniffResult sniff = SniffMedia(head);
  const FrameData::Storage storage =
      options.frames_in_memfd ? FrameData::Storage::kMemfd : FrameData::Storage::kHeap;

  DecodedMedia out;
  if (HasRawFramesMagic(head)) {
    FZ_ASSIGN_OR_RETURN(const RawSource raw, OpenRawFrames(src, limits));
    out.info = RawFramesInfo(raw.frames);
    out.targets_s =
        PlanSampleTimes(sampling, out.info.duration_s, out.info.fps, out.info.frame_count);
    const size_t n = out.targets_s.size();
    out.timestamps_s.assign(n, 0.0);
    FrameBatch& frames = out.frames;
    const auto [h, w] = PreprocessedSize(preprocess, out.info.width, out.info.height);
    FZ_RETURN_IF_ERROR(CheckOutputSize(static_cast<int64_t>(n), h, w, limits));
    frames.num_frames = static_cast<int>(n);
    frames.height = h;
    frames.width = w;
    FZ_RETURN_IF_ERROR(frames.data.Resize(frames.FrameSize() * n, storage));
    FZ_RETURN_IF_ERROR(SampleRawFrames(
        src, raw, out.targets_s, deadline,
        [&](size_t i, const ImageView& rgb, double time_s) -> Status {
          PreprocessImage(rgb, preprocess, frames.height, frames.width,
                          frames.data.data() + frames.FrameSize() * i);
          out.timestamps_s[i] = time_s;
          return absl::OkStatus();
        },
        &out.stats));
  } else if (sniff.is_still_image) {
    FZ_ASSIGN_OR_RETURN(const ImageBytes bytes, LoadImageBytes(src));
    FZ_ASSIGN_OR_RETURN(const RgbImage image,
                        internal::DecodeStillImage(bytes.view, sniff, limits));
    out.info = ImageInfo(sniff, image.width, image.height);
    if (preprocess.anyres_pinpoints.empty()) {
      const auto [h, w] = PreprocessedSize(preprocess, image.width, image.height);
      FZ_RETURN_IF_ERROR(CheckOutputSize(1, h, w, limits));
      out.frames.num_frames = 1;
      out.frames.height = h;
      out.frames.width = w;
      FZ_RETURN_IF_ERROR(out.frames.data.Resize(out.frames.FrameSize(), storage));
      PreprocessImage(image.View(), preprocess, h, w, out.frames.data.data());
    } else {
      const AnyresTiling tiling = PlanAnyresTiles(preprocess, image.width, image.height);
      FZ_RETURN_IF_ERROR(CheckOutputSize(tiling.num_frames(), tiling.tile, tiling.tile, limits));
      out.frames.num_frames = tiling.num_frames();
      out.frames.height = out.frames.width = tiling.tile;
      FZ_RETURN_IF_ERROR(out.frames.data.Resize(
          out.frames.FrameSize() * static_cast<size_t>(tiling.num_frames()), storage));
      PreprocessAnyresImage(image.View(), preprocess, tiling, out.frames.data.data());
    }
    // Every tile of an image is the image at t = 0.
    out.timestamps_s.assign(static_cast<size_t>(out.frames.num_frames), 0.0);
    out.targets_s = out.timestamps_s;
  } else {
    FZ_ASSIGN_OR_RETURN(auto decoder, internal::VideoDecoder::Open(src.bytes, limits, &deadline));
    out.info = decoder->info();
    if (!sniff.mime_type.empty()) out.info.mime_type = sniff.mime_type;
    out.targets_s =
        PlanSampleTimes(sampling, out.info.duration_s, out.info.fps, out.info.frame_count);
    const size_t n = out.targets_s.size();
    out.timestamps_s.assign(n, 0.0);
    FrameBatch& frames = out.frames;
    // The batch shape comes from the first frame (headers can omit or misstate the size).
    FZ_RETURN_IF_ERROR(decoder->Sample(
        out.targets_s, [&](size_t i, const ImageView& rgb, double time_s) -> Status {
          if (frames.data.empty()) {
            const auto [h, w] = PreprocessedSize(preprocess, rgb.width, rgb.height);
            FZ_RETURN_IF_ERROR(CheckOutputSize(static_cast<int64_t>(n), h, w, limits));
            frames.num_frames = static_cast<int>(n);
            frames.height = h;
            frames.width = w;
            FZ_RETURN_IF_ERROR(frames.data.Resize(frames.FrameSize() * n, storage));
          }
          PreprocessImage(rgb, preprocess, frames.height, frames.width,
                          frames.data.data() + frames.FrameSize() * i);
          out.timestamps_s[i] = time_s;
          return absl::OkStatus();
        }));
    out.stats = decoder->stats();
  }
  out.info.size_bytes = src.size;
  FZ_ASSIGN_OR_RETURN(out.info.content_hash, Hash(src, options, deadline));
  return out;
}

StatusOr<DecodedMedia> VerifyMedia(const MediaSource& source, const FrameSamplingSpec& sampling,
                                   const MediaLimits& limits, const DecodeOptions& options) {
  FZ_RETURN_IF_ERROR(ValidateSamplingSpec(sampling, limits));
  const Deadline deadline(limits.max_decode_s, options.cancel);
  FZ_ASSIGN_OR_RETURN(const OpenedSource src, OpenSource(source, limits));
  FZ_ASSIGN_OR_RETURN(const std::vector<uint8_t> head, ReadRange(src, 0, 64 * 1024));
  const SniffResult sniff = SniffMedia(head);

  DecodedMedia out;
  if (HasRawFramesMagic(head)) {
    FZ_ASSIGN_OR_RETURN(const RawSource raw, OpenRawFrames(src, limits));
    out.info = RawFramesInfo(raw.frames);
    out.targets_s =
        PlanSampleTimes(sampling, out.info.duration_s, out.info.fps, out.info.frame_count);
    out.timestamps_s.assign(out.targets_s.size(), 0.0);
    FZ_RETURN_IF_ERROR(SampleRawFrames(
        src, raw, out.targets_s, deadline,
        [&](size_t i, const ImageView&, double time_s) -> Status {
          out.timestamps_s[i] = time_s;
          return absl::OkStatus();
        },
        &out.stats));
  } else if (sniff.is_still_image) {
    FZ_ASSIGN_OR_RETURN(const ImageBytes bytes, LoadImageBytes(src));
    FZ_ASSIGN_OR_RETURN(const RgbImage image,
                        internal::DecodeStillImage(bytes.view, sniff, limits));
    out.info = ImageInfo(sniff, image.width, image.height);
    out.timestamps_s = {0.0};
    out.targets_s = {0.0};
  } else {
    FZ_ASSIGN_OR_RETURN(auto decoder, internal::VideoDecoder::Open(src.bytes, limits, &deadline));
    out.info = decoder->info();
    if (!sniff.mime_type.empty()) out.info.mime_type = sniff.mime_type;
    out.targets_s =
        PlanSampleTimes(sampling, out.info.duration_s, out.info.fps, out.info.frame_count);
    out.timestamps_s.assign(out.targets_s.size(), 0.0);
    // The sink sees each frame converted to RGB, as DecodeMedia's does, and keeps nothing.
    FZ_RETURN_IF_ERROR(decoder->Sample(
        out.targets_s, [&](size_t i, const ImageView& rgb, double time_s) -> Status {
          if (rgb.width <= 0 || rgb.height <= 0) {
            return InvalidArgumentError("decoded frame {} has no size", i);
          }
          out.timestamps_s[i] = time_s;
          return absl::OkStatus();
        }));
    out.stats = decoder->stats();
  }
  out.info.size_bytes = src.size;
  FZ_ASSIGN_OR_RETURN(out.info.content_hash, Hash(src, options, deadline));
  return out;
}

StatusOr<int64_t> DecodeAllFrames(const MediaSource& source, const MediaLimits& limits) {
  const Deadline deadline(limits.max_decode_s, nullptr);
  FZ_ASSIGN_OR_RETURN(const OpenedSource src, OpenSource(source, limits));
  FZ_ASSIGN_OR_RETURN(auto decoder, internal::VideoDecoder::Open(src.bytes, limits, &deadline));
  return decoder->DecodeAll();
}

}  // namespace framezip::media
