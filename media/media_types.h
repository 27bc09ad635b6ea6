// The plain structs of the media stage's contract (see media/README.md): where media comes from,
// how frames are sampled and preprocessed, the limits a request runs under, and what comes back.
// No FFmpeg, OpenCV, protobuf or engine type appears here; the server converts these to and from
// its own types.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "media/content_hash.h"
#include "media/frame_data.h"

namespace framezip::media {

// Where the media bytes come from. Exactly one of the three forms:
//  - bytes: an uploaded buffer, borrowed (the caller keeps it alive for the duration of the call);
//  - file: `path` (relative to `root`, or absolute) that must resolve, after following symlinks,
//    to a regular file under `root`. Nothing outside `root` is ever opened.
//  - fd: an open, readable descriptor of a regular file (or memfd), borrowed; read with pread, so
//    its offset is left alone. A sandboxed media worker gets its input this way, opening nothing.
struct MediaSource {
  enum class Kind { kBytes, kFile, kFd };
  Kind kind = Kind::kBytes;
  std::span<const uint8_t> bytes;
  std::filesystem::path root;
  std::string path;
  int fd = -1;

  static MediaSource FromBytes(std::span<const uint8_t> data) {
    MediaSource s;
    s.kind = Kind::kBytes;
    s.bytes = data;
    return s;
  }
  static MediaSource FromFd(int fd) {
    MediaSource s;
    s.kind = Kind::kFd;
    s.fd = fd;
    return s;
  }
  static MediaSource FromFile(std::filesystem::path media_root, std::string file_path) {
    MediaSource s;
    s.kind = Kind::kFile;
    s.root = std::move(media_root);
    s.path = std::move(file_path);
    return s;
  }
};

// Which frames of a video to return. Timestamps are seconds from the start of the video stream.
//  - kUniform: `num_frames` targets t_i = i * duration / n, i in [0, n) (Hugging Face's
//    `arange(0, total, total / n)` on a time axis), with n = min(num_frames, frames in the
//    video). Each target returns the frame being displayed at t_i (the last with pts <= t_i).
//  - kFps: targets every 1/fps seconds from 0; when that gives more than `num_frames`, falls back
//    to uniform `num_frames` over the whole duration (vLLM's fps-with-maximum behaviour).
// An image is always one frame.
struct FrameSamplingSpec {
  enum class Mode { kUniform, kFps };
  Mode mode = Mode::kUniform;
  int num_frames = 32;  // uniform: the count; fps: the maximum
  double fps = 1.0;     // kFps only
};

enum class ResizeMode {
  kNone,          // keep the (rotated) source size
  kExact,         // squash to height x width, aspect ratio not kept (SigLIP, LLaVA-OV video)
  kShortestEdge,  // shorter side to `shortest_edge`, longer side int(s * long / short) (CLIP)
};
enum class Interpolation { kBicubic, kBilinear, kNearest };

// Whose resampling arithmetic to reproduce (docs/models.md §2.1.6). All use the antialiased
// separable kernels (a = -0.5 cubic, support scaled when downscaling), horizontal pass first:
//  - kTorchvision: torch's native uint8 CPU kernel, which torchvision >= 0.17 runs for uint8
//    images with bicubic/bilinear on CPU (transformers' default "torchvision" image processors
//    and every video processor, e.g. LLaVA-OneVision's): int16 fixed-point weights at the
//    largest precision that fits, uint8 between the passes. Bit-exact with it.
//  - kPil: Pillow's ImagingResample (22-bit fixed point, uint8 between passes), transformers'
//    *ImageProcessorPil classes. Bit-exact with Pillow.
//  - kTorchvisionFloat: float accumulation and one round-half-to-even at the end, what
//    torchvision computes for float inputs or on GPU; within about one level of the others.
enum class Resampler { kTorchvision, kPil, kTorchvisionFloat };
enum class ChannelOrder { kRgb, kBgr };

// How each frame becomes model input: optional pad-to-square, resize, optional center crop,
// then value = (u8 * rescale_factor - mean[c]) / std[c] as float32, channel-first.
struct PreprocessSpec {
  ResizeMode resize = ResizeMode::kExact;
  int height = 384;       // kExact
  int width = 384;        // kExact
  int shortest_edge = 0;  // kShortestEdge
  Interpolation interpolation = Interpolation::kBicubic;
  Resampler resampler = Resampler::kTorchvision;
  // Pad to a square canvas of this colour before resizing, image centred at (max - min) / 2
  // (LLaVA's single-tile path, docs/models.md §2.1.4).
  bool pad_to_square = false;
  std::array<uint8_t, 3> pad_rgb = {127, 127, 127};
  // Center crop after resizing; 0 = none. Offsets are floor((size - crop) / 2) (transformers).
  int crop_height = 0;
  int crop_width = 0;
  double rescale_factor = 1.0 / 255.0;
  std::array<float, 3> mean = {0.5f, 0.5f, 0.5f};  // in RGB order
  std::array<float, 3> std = {0.5f, 0.5f, 0.5f};   // in RGB order
  ChannelOrder channel_order = ChannelOrder::kRgb;
  // Still images only: LLaVA-OneVision's anyres tiles (media/anyres_tiles.h), candidate canvases
  // as (height, width) pixels. An image then gives 1 + tiles frames of height x width: the whole
  // image first, then the canvas's tiles row-major. Needs kExact with height == width (the tile
  // side) and every canvas a multiple of it; no pad_to_square or crop. Empty: one frame.
  std::vector<std::pair<int64_t, int64_t>> anyres_pinpoints;
};

// The most anyres canvases a spec may list (LLaVA-OneVision's own list has 36).
inline constexpr size_t kMaxAnyresPinpoints = 256;

// What a request may cost. Exceeding one is an error naming the limit, the value and the limit.
// Defaults suit a server taking uploads up to a two-hour 4K lecture.
struct MediaLimits {
  int64_t max_bytes = int64_t{4} << 30;  // size of the media bytes or file
  double max_duration_s = 4 * 3600.0;    // container/stream duration
  int max_width = 8192;                  // coded or displayed frame size
  int max_height = 8192;
  int max_frames = 512;                         // frames one request may sample
  double max_decode_s = 120.0;                  // wall time of the whole call (open, seek, decode)
  int decode_threads = 0;                       // decoder threads; 0 = min(hardware threads, 8)
  int64_t max_output_bytes = int64_t{1} << 30;  // the preprocessed float frames of one call
};

enum class MediaKind { kVideo, kImage };

// Metadata, known after probing (no full decode). Sizes are as displayed, i.e. after applying the
// stream's rotation; `coded_width`/`coded_height` are the stored frame size.
struct MediaInfo {
  MediaKind kind = MediaKind::kVideo;
  std::string mime_type;     // "video/mp4", "image/png", ...
  std::string container;     // FFmpeg demuxer name ("mov,mp4,m4a,3gp,3g2,mj2") or image format
  std::string codec;         // "h264", "vp9", "png", ...
  std::string pixel_format;  // "yuv420p", ... (images: "rgb24" after decoding)
  int width = 0;
  int height = 0;
  int coded_width = 0;
  int coded_height = 0;
  int rotation_degrees = 0;  // clockwise rotation applied for display: 0, 90, 180, 270
  double duration_s = 0.0;   // 0 for images
  double fps = 0.0;          // average frame rate; 0 when unknown or for images
  int64_t frame_count = 0;   // declared or estimated from duration * fps; 1 for images
  bool has_audio = false;
  int64_t size_bytes = 0;
  ContentHash content_hash{};  // SHA-256 of the media bytes (KV cache key)
};

// Preprocessed frames, contiguous [num_frames, 3, height, width] float32, channel order as asked.
struct FrameBatch {
  int num_frames = 0;
  int channels = 3;
  int height = 0;
  int width = 0;
  FrameData data;

  size_t FrameSize() const { return static_cast<size_t>(channels) * height * width; }
  const float* Frame(int i) const { return data.data() + FrameSize() * i; }
};

struct DecodedMedia {
  MediaInfo info;
  FrameBatch frames;
  // Per frame: the presentation time of the returned frame and the target it was chosen for,
  // in seconds from the start of the stream (0 for an image).
  std::vector<double> timestamps_s;
  std::vector<double> targets_s;

  // What it cost: seeks made, packets read and frames decoded for the video stream (metrics,
  // and the evidence that sampling seeks instead of decoding everything).
  struct Stats {
    int seeks = 0;
    int64_t packets = 0;
    int64_t frames_decoded = 0;
    int64_t decode_errors = 0;
  };
  Stats stats;
};

}  // namespace framezip::media
