// Every frame width from 2 to 160 (and odd heights) decodes to exactly the bytes the ffmpeg tool
// decodes. swscale's SIMD converters write whole vectors per row and read their tables at
// aligned offsets, so an RGB buffer whose rows are not padded and aligned as FFmpeg's own frames
// are either corrupts the heap (width % 16 in {8, 10, 12} with packed rows) or takes a different
// rounding path (width % 16 in {2, 4, 6}); this sweep catches both, byte for byte.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string>

#include "media/media.h"
#include "tests/testing/child_process.h"
#include "tests/unit/media/media_test_util.h"

namespace framezip::media {
namespace {

using testing::RawPixels;
using testing::ReadFileBytes;

struct Clip {
  int width = 0;
  int height = 0;
  std::string pix_fmt;
  std::vector<std::string> codec_args;  // e.g. {"-c:v", "ffv1"}
  std::filesystem::path path;
};

// Encodes every clip from one testsrc2 (rich colours and edges, two frames at 0 s and 0.5 s)
// scaled to exactly its size, in ONE ffmpeg run (a split filter feeding one output per clip):
// the sweep has hundreds of clips and a process per clip would dominate the test's time.
void EncodeClips(std::vector<Clip>& clips, const std::string& tag) {
  std::string graph = fmt::format("[0:v]split={}", clips.size());
  for (size_t i = 0; i < clips.size(); ++i) graph += fmt::format("[s{}]", i);
  for (size_t i = 0; i < clips.size(); ++i) {
    graph += fmt::format(";[s{}]scale={}:{}[o{}]", i, clips[i].width, clips[i].height, i);
  }
  std::vector<std::string> argv = {"ffmpeg", "-nostdin", "-v",           "error",
                                   "-y",     "-f",       "lavfi",        "-i",
                                   "testsrc2=s=160x128:r=2:d=1", "-filter_complex", graph};
  for (size_t i = 0; i < clips.size(); ++i) {
    Clip& c = clips[i];
    c.path = testing::MediaDir() / fmt::format("{}_{}x{}_{}.mkv", tag, c.width, c.height, i);
    argv.insert(argv.end(), {"-map", fmt::format("[o{}]", i), "-pix_fmt", c.pix_fmt});
    argv.insert(argv.end(), c.codec_args.begin(), c.codec_args.end());
    argv.push_back(c.path.string());
  }
  REQUIRE(framezip::testing::RunCommand(argv, testing::MediaDir() / (tag + ".log")) == 0);
}

// Every clip's frames as rgb24, decoded by the ffmpeg tool (the reference), in one run.
std::vector<std::vector<uint8_t>> ReferenceRgb(const std::vector<Clip>& clips,
                                               const std::string& tag) {
  std::vector<std::string> argv = {"ffmpeg", "-nostdin", "-v", "error", "-y"};
  for (const Clip& c : clips) argv.insert(argv.end(), {"-i", c.path.string()});
  for (size_t i = 0; i < clips.size(); ++i) {
    argv.insert(argv.end(), {"-map", fmt::format("{}:v", i), "-f", "rawvideo", "-pix_fmt",
                             "rgb24", clips[i].path.string() + ".rgb"});
  }
  REQUIRE(framezip::testing::RunCommand(argv, testing::MediaDir() / (tag + ".ref.log")) == 0);
  std::vector<std::vector<uint8_t>> out;
  for (const Clip& c : clips) out.push_back(ReadFileBytes(c.path.string() + ".rgb"));
  return out;
}

// Decodes the clip's two frames with the media stage and counts the bytes that differ from the
// ffmpeg tool's rgb24 frames.
size_t CountDifferences(const Clip& clip, const std::vector<uint8_t>& reference) {
  const size_t frame_bytes = static_cast<size_t>(clip.width) * clip.height * 3;
  REQUIRE(reference.size() == 2 * frame_bytes);
  FrameSamplingSpec sampling;
  sampling.num_frames = 2;
  const std::vector<uint8_t> bytes = ReadFileBytes(clip.path);
  StatusOr<DecodedMedia> decoded =
      DecodeMedia(MediaSource::FromBytes(bytes), sampling, RawPixels(), MediaLimits{});
  INFO((decoded.ok() ? "" : MessageOf(decoded.status())));
  REQUIRE(decoded.ok());
  const FrameBatch& frames = decoded->frames;
  REQUIRE(frames.num_frames == 2);
  REQUIRE(frames.width == clip.width);
  REQUIRE(frames.height == clip.height);
  const size_t plane = static_cast<size_t>(clip.width) * clip.height;
  size_t differing = 0;
  for (int f = 0; f < 2; ++f) {
    const float* ours = frames.Frame(f);
    const uint8_t* theirs = &reference[f * frame_bytes];
    for (size_t p = 0; p < plane; ++p) {
      for (int c = 0; c < 3; ++c) {
        if (ours[c * plane + p] != static_cast<float>(theirs[p * 3 + c])) ++differing;
      }
    }
  }
  return differing;
}

void CheckClips(std::vector<Clip> clips, const std::string& tag) {
  EncodeClips(clips, tag);
  const std::vector<std::vector<uint8_t>> references = ReferenceRgb(clips, tag);
  for (size_t i = 0; i < clips.size(); ++i) {
    const Clip& c = clips[i];
    INFO(c.width << "x" << c.height << " " << c.pix_fmt << " " << fmt::format("{}", fmt::join(c.codec_args, " ")));
    CHECK(CountDifferences(c, references[i]) == 0);
  }
}

TEST_CASE("every frame width 2..160 decodes to the ffmpeg tool's rgb24 bytes", "[unit][media]") {
  // Odd heights throughout, a different one per width (7..19), 4:2:0 as most videos are, through
  // FFV1 (lossless, any size).
  std::vector<Clip> clips;
  for (int width = 2; width <= 160; ++width) {
    clips.push_back({width, 7 + 2 * (width % 7), "yuv420p", {"-c:v", "ffv1"}, {}});
  }
  CheckClips(std::move(clips), "ffv1_420");
}

TEST_CASE("H.264 4:2:0 at every even width 2..160 decodes to the ffmpeg tool's rgb24 bytes",
          "[unit][media]") {
  // The common case of the report: libx264 yuv420p (even sizes only), 426x240 and 2x2 among them.
  std::vector<Clip> clips;
  const std::vector<std::string> x264 = {"-c:v", "libx264", "-preset", "ultrafast"};
  for (int width = 2; width <= 160; width += 2) {
    clips.push_back({width, 8 + 2 * (width % 5), "yuv420p", x264, {}});
  }
  clips.push_back({426, 240, "yuv420p", x264, {}});
  clips.push_back({2, 2, "yuv420p", x264, {}});
  CheckClips(std::move(clips), "h264_420");
}

TEST_CASE("other pixel formats at awkward widths decode to the ffmpeg tool's rgb24 bytes",
          "[unit][media]") {
  // 4:4:4, 4:2:2, 10-bit and packed RGB inputs take other swscale paths; the widths hit each
  // residue mod 16 the report named (2, 4, ..., 14) and odd ones.
  std::vector<Clip> clips;
  for (const std::string pix_fmt : {"yuv444p", "yuv422p", "yuv420p10le", "bgr0", "nv12"}) {
    for (int width : {18, 20, 22, 24, 26, 28, 30, 33, 45, 57}) {
      clips.push_back({width, 11, pix_fmt, {"-c:v", pix_fmt == "nv12" ? "rawvideo" : "ffv1"}, {}});
    }
  }
  CheckClips(std::move(clips), "formats");
}

}  // namespace
}  // namespace framezip::media
