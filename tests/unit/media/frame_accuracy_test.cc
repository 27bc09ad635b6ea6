// Frame accuracy: every frame of the generated videos is a solid colour that encodes its frame
// number, so each sampled frame can be identified by its pixels. With uniform sampling each
// returned frame must be the one on screen at its target (the last with pts <= target), its
// reported timestamp that frame's exact time, within one frame interval of the target. Also:
// sampling a long video seeks rather than decoding everything.
#include <catch2/catch.hpp>
#include <cmath>

#include "media/media.h"
#include "tests/testing/child_process.h"
#include "tests/unit/media/media_test_util.h"

namespace framezip::media {
namespace {

using testing::Generate;
using testing::ReadFileBytes;

// Checks frame i of `d` is frame `want` of a colour-coded video.
void CheckFrameIs(const DecodedMedia& d, int i, int64_t want, int64_t total) {
  const auto mean = testing::MeanColour(d.frames, i);
  const auto [got, dist] = testing::NearestCode(mean, total);
  INFO("sample " << i << " target " << d.targets_s[i] << " s, reported " << d.timestamps_s[i]
                 << " s: pixels are frame " << got << " (distance " << dist << "), want " << want);
  CHECK(got == want);
  CHECK(dist < 8.0);
}

struct CfrCase {
  const char* name;
  std::vector<std::string> codec;
};

TEST_CASE("uniform sampling returns the frame on screen at each target", "[unit][media]") {
  constexpr int kRate = 24;
  constexpr double kSeconds = 8.0;
  constexpr int64_t kTotal = 192;  // colour codes are unique below 196
  const std::string src = testing::ColourCodedSource(32, 32, kRate, kSeconds);
  const std::vector<CfrCase> cases = {
      // Default x264 settings: B-frames, so decode order differs from presentation order.
      {"code_h264.mp4", {"-c:v", "libx264", "-g", "50", "-pix_fmt", "yuv420p"}},
      {"code_vp9.webm",
       {"-c:v", "libvpx-vp9", "-g", "50", "-b:v", "200k", "-deadline", "realtime", "-cpu-used",
        "8"}},
      {"code_mjpeg.avi", {"-c:v", "mjpeg", "-q:v", "2"}},
      {"code_hevc.mkv", {"-c:v", "libx265", "-x265-params", "log-level=error:keyint=50"}},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      std::vector<std::string> args = {"-f", "lavfi", "-i", src};
      args.insert(args.end(), c.codec.begin(), c.codec.end());
      const auto bytes = ReadFileBytes(Generate(c.name, args));
      for (const int n : {32, 7}) {
        FrameSamplingSpec sampling;
        sampling.num_frames = n;
        auto d = DecodeMedia(MediaSource::FromBytes(bytes), sampling, testing::RawPixels(), {});
        INFO(c.name << " n=" << n << ": " << (d.ok() ? "" : MessageOf(d.status())));
        REQUIRE(d.ok());
        REQUIRE(d->frames.num_frames == n);
        for (int i = 0; i < n; ++i) {
          const double target = d->targets_s[i];
          CHECK(target == Approx(i * kSeconds / n).margin(1e-9));
          const auto want = static_cast<int64_t>(std::floor(target * kRate + 1e-6));
          // Matroska/WebM store milliseconds: exact up to half of that.
          CHECK(d->timestamps_s[i] == Approx(static_cast<double>(want) / kRate).margin(6e-4));
          CHECK(std::fabs(d->timestamps_s[i] - target) < 1.0 / kRate);
          CheckFrameIs(*d, i, want, kTotal);
        }
      }
    }
  }
}

TEST_CASE("streams without an index or a duration still sample the right frames", "[unit][media]") {
  // Matroska written to a pipe has no cues (index) and no duration in its header; MPEG-TS never
  // has an index. The decoder measures the duration from the packets and seeks without an index.
  constexpr int kRate = 10;
  const std::string src = testing::ColourCodedSource(32, 32, kRate, 16.0);
  const auto mkv = testing::MediaDir() / "piped.mkv";
  const std::string cmd = "ffmpeg -nostdin -v error -y -f lavfi -i \"" + src +
                          "\" -c:v libx264 -g 20 -pix_fmt yuv420p -f matroska - > " + mkv.string();
  REQUIRE(framezip::testing::RunCommand({"sh", "-c", cmd}) == 0);
  const auto ts = Generate("stream.ts", {"-f", "lavfi", "-i", src, "-c:v", "libx264", "-g", "20",
                                         "-pix_fmt", "yuv420p", "-f", "mpegts"});
  for (const auto& path : {mkv, ts}) {
    DYNAMIC_SECTION(path.filename().string()) {
      const auto bytes = ReadFileBytes(path);
      FrameSamplingSpec sampling;
      sampling.num_frames = 8;
      auto d = DecodeMedia(MediaSource::FromBytes(bytes), sampling, testing::RawPixels(), {});
      INFO((d.ok() ? "" : MessageOf(d.status())));
      REQUIRE(d.ok());
      CHECK(d->info.duration_s == Approx(16.0).margin(0.15));
      REQUIRE(d->frames.num_frames == 8);
      for (int i = 0; i < 8; ++i) {
        const auto want = static_cast<int64_t>(std::floor(d->targets_s[i] * kRate + 1e-6));
        CHECK(std::fabs(d->timestamps_s[i] - d->targets_s[i]) < 1.0 / kRate + 1e-3);
        CheckFrameIs(*d, i, want, 160);
      }
    }
  }
}

TEST_CASE("variable frame rate: each target gets the frame shown at that time", "[unit][media]") {
  // Frame n is shown from t = 0.01 * n^2 s (gaps grow from 10 ms to 390 ms).
  const std::string src =
      testing::ColourCodedSource(32, 32, 10, 2.0) + ",settb=1/1000,setpts='N*N*10'";
  const auto bytes =
      ReadFileBytes(Generate("vfr.mkv", {"-f", "lavfi", "-i", src, "-fps_mode", "passthrough",
                                         "-c:v", "libx264", "-pix_fmt", "yuv420p"}));
  FrameSamplingSpec sampling;
  sampling.num_frames = 16;
  auto d = DecodeMedia(MediaSource::FromBytes(bytes), sampling, testing::RawPixels(), {});
  INFO((d.ok() ? "" : MessageOf(d.status())));
  REQUIRE(d.ok());
  REQUIRE(d->frames.num_frames == 16);
  for (int i = 0; i < 16; ++i) {
    const double target = d->targets_s[i];
    int64_t want = 0;
    while (want + 1 < 20 && 0.01 * (want + 1) * (want + 1) <= target + 1e-9) ++want;
    CHECK(d->timestamps_s[i] == Approx(0.01 * want * want).margin(1e-3));
    CheckFrameIs(*d, i, want, 20);
  }
}

TEST_CASE("fps sampling with a maximum", "[unit][media]") {
  const auto bytes = ReadFileBytes(
      Generate("fps_h264.mp4", {"-f", "lavfi", "-i", testing::ColourCodedSource(32, 32, 25, 8.0),
                                "-c:v", "libx264", "-pix_fmt", "yuv420p"}));
  FrameSamplingSpec sampling;
  sampling.mode = FrameSamplingSpec::Mode::kFps;
  sampling.fps = 2.0;
  sampling.num_frames = 32;
  auto d = DecodeMedia(MediaSource::FromBytes(bytes), sampling, testing::RawPixels(), {});
  REQUIRE(d.ok());
  REQUIRE(d->frames.num_frames == 16);  // 8 s at 2 fps
  for (int i = 0; i < 16; ++i) {
    CHECK(d->targets_s[i] == Approx(i * 0.5));
    CheckFrameIs(*d, i, i * 25 / 2, 200);
  }
  sampling.num_frames = 5;  // over the maximum: uniform 5 instead
  d = DecodeMedia(MediaSource::FromBytes(bytes), sampling, testing::RawPixels(), {});
  REQUIRE(d.ok());
  REQUIRE(d->frames.num_frames == 5);
  CHECK(d->targets_s[1] == Approx(1.6));
  CheckFrameIs(*d, 1, 40, 200);
}

TEST_CASE("sampling a long video seeks instead of decoding every frame", "[unit][media]") {
  // 120 s at 10 fps with a keyframe every 2 s: 1200 frames; 8 samples should decode a few dozen.
  const auto bytes = ReadFileBytes(Generate(
      "long.mp4", {"-f", "lavfi", "-i", testing::ColourCodedSource(16, 16, 10, 120.0), "-c:v",
                   "libx264", "-preset", "ultrafast", "-g", "20", "-pix_fmt", "yuv420p"}));
  FrameSamplingSpec sampling;
  sampling.num_frames = 8;
  auto d = DecodeMedia(MediaSource::FromBytes(bytes), sampling, testing::RawPixels(), {});
  REQUIRE(d.ok());
  INFO("seeks " << d->stats.seeks << ", frames decoded " << d->stats.frames_decoded);
  CHECK(d->stats.seeks >= 7);
  CHECK(d->stats.frames_decoded < 8 * 25);
  for (int i = 0; i < 8; ++i) CheckFrameIs(*d, i, (i * 150) % 196, 196);  // codes repeat every 196
}

}  // namespace
}  // namespace framezip::media
