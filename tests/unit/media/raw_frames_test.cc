// Raw RGB24 frames (media/raw_frames.h): the description's checks name the field, a raw-frames
// file samples and preprocesses to exactly the frames of the video its pixels were decoded from,
// and a lying header is refused before anything is read past it.
#include "media/raw_frames.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "media/media.h"
#include "tests/unit/media/media_test_util.h"

namespace framezip::media {
namespace {

using testing::Generate;
using testing::RawPixels;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

RawFrames Valid() {
  RawFrames f;
  f.width = 4;
  f.height = 2;
  f.stride_bytes = 16;
  f.frame_count = 3;
  f.timestamps_us = {0, 100'000, 200'000};
  return f;
}

// The raw-frames file of `f` with `pixels` after its header.
std::string FileOf(const RawFrames& f, const std::string& pixels) {
  return EncodeRawFramesHeader(f) + pixels;
}

// Every frame of `video` as RGB bytes (identity preprocessing) and their timestamps.
struct DecodedFrames {
  RawFrames frames;
  std::string pixels;
  double duration_s = 0;
};
DecodedFrames DecodeEveryFrame(const std::filesystem::path& video, int64_t stride_padding) {
  const MediaSource source = MediaSource::FromFile(video.parent_path(), video.filename());
  auto probed = ProbeMedia(source, {});
  REQUIRE(probed.ok());
  MediaLimits limits;
  limits.max_frames = static_cast<int>(probed->frame_count);
  auto all = DecodeMedia(source, {.num_frames = static_cast<int>(probed->frame_count)}, RawPixels(),
                         limits);
  REQUIRE(all.ok());
  const FrameBatch& fb = all->frames;
  REQUIRE(fb.num_frames == probed->frame_count);
  DecodedFrames out;
  out.duration_s = all->info.duration_s;
  RawFrames& f = out.frames;
  f.width = fb.width;
  f.height = fb.height;
  f.stride_bytes = 3 * fb.width + stride_padding;
  f.frame_count = fb.num_frames;
  for (int i = 0; i < fb.num_frames; ++i) {
    f.timestamps_us.push_back(std::llround(all->timestamps_s[i] * 1e6));
    for (int y = 0; y < fb.height; ++y) {
      for (int x = 0; x < fb.width; ++x) {
        for (int c = 0; c < 3; ++c) {
          // RawPixels keeps the bytes' values: an exact float of an integer in [0, 255].
          const float v = fb.Frame(i)[(static_cast<size_t>(c) * fb.height + y) * fb.width + x];
          out.pixels.push_back(static_cast<char>(static_cast<uint8_t>(v)));
        }
      }
      out.pixels.append(static_cast<size_t>(stride_padding), '\x5a');  // padding, ignored
    }
  }
  return out;
}

TEST_CASE("raw frames: each wrong field is refused naming it", "[unit][media]") {
  const RawFrameLimits limits;
  CHECK(CheckRawFrames(Valid(), limits, "f").ok());
  struct Case {
    const char* what;
    void (*mutate)(RawFrames&);
    const char* field;
  };
  const Case cases[] = {
      {"zero width", [](RawFrames& f) { f.width = 0; }, "f.width"},
      {"negative width", [](RawFrames& f) { f.width = -4; }, "f.width"},
      {"huge width", [](RawFrames& f) { f.width = 8193; }, "f.width"},
      {"zero height", [](RawFrames& f) { f.height = 0; }, "f.height"},
      {"huge height", [](RawFrames& f) { f.height = int64_t{1} << 40; }, "f.height"},
      {"stride below 3 * width", [](RawFrames& f) { f.stride_bytes = 11; }, "f.stride_bytes"},
      {"no frames", [](RawFrames& f) { f.frame_count = 0; }, "f.frame_count"},
      {"over the frame limit", [](RawFrames& f) { f.frame_count = kMaxRawFrames + 1; },
       "f.frame_count"},
      {"a timestamp short", [](RawFrames& f) { f.timestamps_us.pop_back(); }, "f.timestamps_us"},
      {"a negative timestamp", [](RawFrames& f) { f.timestamps_us[0] = -1; }, "f.timestamps_us[0]"},
      {"a repeated timestamp", [](RawFrames& f) { f.timestamps_us[2] = 100'000; },
       "f.timestamps_us[2]"},
      {"a decreasing timestamp", [](RawFrames& f) { f.timestamps_us[1] = 300'000; },
       "f.timestamps_us[2]"},
      {"past the duration limit", [](RawFrames& f) { f.timestamps_us[2] = 5 * 3600'000'000LL; },
       "f.timestamps_us[2]"},
      {"negative duration", [](RawFrames& f) { f.duration_us = -1; }, "f.duration_us"},
      {"duration before the last frame", [](RawFrames& f) { f.duration_us = 200'000; },
       "f.duration_us"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    RawFrames f = Valid();
    c.mutate(f);
    const Status s = CheckRawFrames(f, limits, "f");
    CHECK(absl::IsInvalidArgument(s));
    CHECK_THAT(std::string(MessageOf(s)), Catch::StartsWith(std::string(c.field) + ":"));
  }
  // The frame-size limit is the one the caller passes (the server's for decoded video).
  RawFrameLimits small;
  small.max_width = 2;
  CHECK_THAT(std::string(MessageOf(CheckRawFrames(Valid(), small, "f"))),
             Catch::Contains("[1, 2]"));
}

TEST_CASE("raw frames: duration, pixel size and the frame shown at a time", "[unit][media]") {
  RawFrames f = Valid();
  CHECK(RawFramesPixelBytes(f) == 16 * 2 * 3);
  CHECK(ResolvedDurationUs(f) == 300'000);  // last + mean interval
  f.duration_us = 250'000;
  CHECK(ResolvedDurationUs(f) == 250'000);
  RawFrames one = Valid();
  one.frame_count = 1;
  one.timestamps_us = {40'000};
  CHECK(ResolvedDurationUs(one) == 1'040'000);

  f.timestamps_us = {20'000, 100'000, 200'000};
  CHECK(RawFrameAt(f, 0) == 0);         // before the first frame: the first is shown
  CHECK(RawFrameAt(f, 99'999.5) == 1);  // within the decoder's 1 us of the frame
  CHECK(RawFrameAt(f, 99'998) == 0);
  CHECK(RawFrameAt(f, 150'000) == 1);
  CHECK(RawFrameAt(f, 1e12) == 2);

  // Header round trip, the resolved duration stored.
  f.duration_us = 0;
  const std::string header = EncodeRawFramesHeader(f);
  REQUIRE(header.size() == kRawFramesFixedHeaderBytes + 8 * 3);
  CHECK(HasRawFramesMagic(Bytes(header)));
  auto parsed = ParseRawFramesFixedHeader(Bytes(header));
  REQUIRE(parsed.ok());
  CHECK(parsed->width == 4);
  CHECK(parsed->height == 2);
  CHECK(parsed->stride_bytes == 16);
  CHECK(parsed->frame_count == 3);
  CHECK(parsed->duration_us == 290'000);  // 200000 + (200000 - 20000) / 2
  REQUIRE(
      ParseRawFramesTimestamps(Bytes(header).subspan(kRawFramesFixedHeaderBytes), *parsed).ok());
  CHECK(parsed->timestamps_us == f.timestamps_us);
}

TEST_CASE("raw frames: sampled and preprocessed bit-identical to the decoded video's",
          "[unit][media]") {
  const auto video =
      Generate("raw_src.mp4", {"-f", "lavfi", "-i", "testsrc2=size=96x64:rate=10:duration=3",
                               "-c:v", "libx264", "-pix_fmt", "yuv420p"});
  const DecodedFrames decoded = DecodeEveryFrame(video, /*stride_padding=*/7);
  CHECK(decoded.frames.frame_count == 30);
  const std::string file = FileOf(decoded.frames, decoded.pixels);
  const auto raw_path = testing::MediaDir() / "raw_src.rgb24";
  testing::WriteFileBytes(raw_path, {file.begin(), file.end()});

  PreprocessSpec siglip;  // LLaVA-OneVision's video processor, scaled down
  siglip.height = siglip.width = 48;
  PreprocessSpec clip;
  clip.resize = ResizeMode::kShortestEdge;
  clip.shortest_edge = 40;
  clip.crop_height = clip.crop_width = 32;
  clip.resampler = Resampler::kPil;
  const MediaSource from_video = MediaSource::FromFile(video.parent_path(), video.filename());
  for (const MediaSource& from_raw :
       {MediaSource::FromFile(raw_path.parent_path(), raw_path.filename()),
        MediaSource::FromBytes(Bytes(file))}) {
    for (const PreprocessSpec& spec : {siglip, clip}) {
      for (const FrameSamplingSpec& sampling :
           {FrameSamplingSpec{.num_frames = 8}, FrameSamplingSpec{.num_frames = 7},
            FrameSamplingSpec{.mode = FrameSamplingSpec::Mode::kFps, .num_frames = 32, .fps = 2}}) {
        auto a = DecodeMedia(from_video, sampling, spec, {});
        auto b = DecodeMedia(from_raw, sampling, spec, {});
        REQUIRE(a.ok());
        INFO(MessageOf(b.status()));
        REQUIRE(b.ok());
        CHECK(b->info.duration_s == Approx(a->info.duration_s).margin(1e-6));
        CHECK(b->info.fps == Approx(a->info.fps));
        CHECK(b->info.width == a->info.width);
        CHECK(b->info.height == a->info.height);
        REQUIRE(b->timestamps_s.size() == a->timestamps_s.size());
        for (size_t i = 0; i < a->timestamps_s.size(); ++i) {
          CHECK(b->timestamps_s[i] == Approx(a->timestamps_s[i]).margin(1e-6));
          CHECK(b->targets_s[i] == Approx(a->targets_s[i]).margin(1e-9));
        }
        CHECK(b->frames.num_frames == a->frames.num_frames);
        CHECK(b->frames.height == a->frames.height);
        CHECK(b->frames.width == a->frames.width);
        CHECK(b->frames.data == a->frames.data);  // bit for bit
        // Only the sampled frames are read.
        CHECK(b->stats.frames_decoded <= static_cast<int64_t>(b->timestamps_s.size()));
      }
    }
  }

  auto probed = ProbeMedia(MediaSource::FromBytes(Bytes(file)), {});
  REQUIRE(probed.ok());
  CHECK(probed->kind == MediaKind::kVideo);
  CHECK(probed->mime_type == kRawFramesMimeType);
  CHECK(probed->container == kRawFramesContainer);
  CHECK(probed->codec == kRawFramesCodec);
  CHECK(probed->frame_count == 30);
  CHECK(probed->content_hash == HashBytes(Bytes(file)));
  auto verified = VerifyMedia(MediaSource::FromBytes(Bytes(file)), {.num_frames = 4}, {});
  REQUIRE(verified.ok());
  const std::vector<double> shown = {0.0, 0.7, 1.5, 2.2};  // targets 0, 0.75, 1.5, 2.25 s
  REQUIRE(verified->timestamps_s.size() == shown.size());
  for (size_t i = 0; i < shown.size(); ++i) {
    CHECK(verified->timestamps_s[i] == Approx(shown[i]).margin(1e-9));
  }
}

TEST_CASE("raw frames: a lying or truncated file is refused before it is read", "[unit][media]") {
  RawFrames f = Valid();
  const std::string pixels(static_cast<size_t>(RawFramesPixelBytes(f)), '\x10');
  auto decode = [](const std::string& file) {
    return DecodeMedia(MediaSource::FromBytes(Bytes(file)), {.num_frames = 2}, RawPixels(), {})
        .status();
  };
  CHECK(decode(FileOf(f, pixels)).ok());

  Status s = decode(FileOf(f, pixels.substr(1)));
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(MessageOf(s)), Catch::Contains("stride_bytes * height * frame_count"));
  CHECK(absl::IsInvalidArgument(decode(FileOf(f, pixels + "x"))));

  // A header claiming 2^32 - 1 frames: refused from the fixed header, no timestamps read.
  std::string huge_count = FileOf(f, pixels);
  for (int i = 0; i < 4; ++i) huge_count[24 + i] = '\xff';
  s = decode(huge_count);
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(MessageOf(s)), Catch::Contains("frame_count"));

  // A stride below a row, a width over the limit, an unknown version, a cut header.
  std::string narrow = FileOf(f, pixels);
  narrow[20] = 5;
  CHECK_THAT(std::string(MessageOf(decode(narrow))), Catch::Contains("raw frames.stride_bytes"));
  std::string wide = FileOf(f, pixels);
  wide[12] = '\x00';
  wide[13] = '\x40';  // width 16384
  CHECK_THAT(std::string(MessageOf(decode(wide))), Catch::Contains("raw frames.width"));
  std::string version = FileOf(f, pixels);
  version[8] = 2;
  CHECK_THAT(std::string(MessageOf(decode(version))), Catch::Contains("version 2"));
  CHECK(absl::IsInvalidArgument(decode(FileOf(f, pixels).substr(0, 20))));
  // Timestamps in the file are checked as the edge checks them.
  std::string backwards = FileOf(f, pixels);
  backwards[kRawFramesFixedHeaderBytes + 16] = 0;  // frame 2 at 200000 -> its low byte cleared
  backwards[kRawFramesFixedHeaderBytes + 17] = 0;
  backwards[kRawFramesFixedHeaderBytes + 18] = 0;
  s = decode(backwards);
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(MessageOf(s)), Catch::Contains("raw frames.timestamps_us[2]"));
}

}  // namespace
}  // namespace framezip::media
