// Decoding videos that the Debian ffmpeg tool generates at test time: every container/codec the
// server accepts (media/README.md), odd sizes, rotation, 4K, and every kind of broken input, each
// to the right frames or the right error.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "media/media.h"
#include "tests/testing/child_process.h"
#include "tests/unit/media/media_test_util.h"

namespace framezip::media {
namespace {

using testing::Generate;
using testing::RawPixels;
using testing::ReadFileBytes;

StatusOr<DecodedMedia> DecodeBytes(const std::vector<uint8_t>& bytes, int frames = 5,
                                   const PreprocessSpec& spec = RawPixels(),
                                   const MediaLimits& limits = {}) {
  FrameSamplingSpec sampling;
  sampling.num_frames = frames;
  return DecodeMedia(MediaSource::FromBytes(bytes), sampling, spec, limits);
}

// All frames of `path` as rgb24, decoded by the ffmpeg tool (the reference).
std::vector<uint8_t> ReferenceFrames(const std::filesystem::path& path) {
  const auto out = path.string() + ".rgb";
  const int rc =
      framezip::testing::RunCommand({"ffmpeg", "-nostdin", "-v", "error", "-y", "-i", path.string(),
                                     "-f", "rawvideo", "-pix_fmt", "rgb24", out});
  REQUIRE(rc == 0);
  return ReadFileBytes(out);
}

double MeanAbsDiff(const FrameBatch& frames, int i, const uint8_t* rgb) {
  const size_t plane = static_cast<size_t>(frames.height) * frames.width;
  const float* f = frames.Frame(i);
  double sum = 0;
  for (size_t p = 0; p < plane; ++p) {
    for (int c = 0; c < 3; ++c) sum += std::fabs(f[c * plane + p] - rgb[p * 3 + c]);
  }
  return sum / static_cast<double>(plane * 3);
}

struct Case {
  const char* name;
  const char* codec;  // MediaInfo::codec
  const char* mime;
  std::vector<std::string> encode;
  int width = 64;
  int height = 48;
};

TEST_CASE("testsrc2 in every container and codec decodes to the frames ffmpeg decodes",
          "[unit][media]") {
  const std::string src48 = "testsrc2=s=64x48:r=10:d=2";
  const std::string src64 = "testsrc2=s=64x64:r=10:d=2";
  const std::vector<Case> cases = {
      {"h264.mp4",
       "h264",
       "video/mp4",
       {"-f", "lavfi", "-i", src48, "-c:v", "libx264", "-pix_fmt", "yuv420p"}},
      {"h265.mp4",
       "hevc",
       "video/mp4",
       {"-f", "lavfi", "-i", src48, "-c:v", "libx265", "-x265-params", "log-level=error",
        "-pix_fmt", "yuv420p", "-tag:v", "hvc1"}},
      {"av1.mp4",
       "av1",
       "video/mp4",
       {"-f", "lavfi", "-i", src64, "-c:v", "libaom-av1", "-cpu-used", "8", "-pix_fmt", "yuv420p"},
       64,
       64},
      {"vp8.webm",
       "vp8",
       "video/webm",
       {"-f", "lavfi", "-i", src48, "-c:v", "libvpx", "-b:v", "300k"}},
      {"vp9.webm",
       "vp9",
       "video/webm",
       {"-f", "lavfi", "-i", src48, "-c:v", "libvpx-vp9", "-b:v", "300k", "-deadline", "realtime",
        "-cpu-used", "8"}},
      {"h264.mkv",
       "h264",
       "video/x-matroska",
       {"-f", "lavfi", "-i", src48, "-c:v", "libx264", "-pix_fmt", "yuv444p"}},
      {"mjpeg.avi",
       "mjpeg",
       "video/x-msvideo",
       {"-f", "lavfi", "-i", src48, "-c:v", "mjpeg", "-q:v", "2"}},
      {"anim.gif", "gif", "image/gif", {"-f", "lavfi", "-i", src48}},
      {"h264.mov",
       "h264",
       "video/quicktime",
       {"-f", "lavfi", "-i", src48, "-c:v", "libx264", "-pix_fmt", "yuv422p"}},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      const auto path = Generate(c.name, c.encode);
      const auto bytes = ReadFileBytes(path);
      const auto ref = ReferenceFrames(path);
      const size_t frame_bytes = static_cast<size_t>(c.width) * c.height * 3;
      const int64_t ref_frames = static_cast<int64_t>(ref.size() / frame_bytes);
      REQUIRE(ref_frames >= 19);

      auto decoded = DecodeBytes(bytes, 5);
      INFO(c.name << ": " << (decoded.ok() ? "" : MessageOf(decoded.status())));
      REQUIRE(decoded.ok());
      const MediaInfo& info = decoded->info;
      CHECK(info.kind == MediaKind::kVideo);
      CHECK(info.codec == c.codec);
      CHECK(info.mime_type == c.mime);
      CHECK(info.width == c.width);
      CHECK(info.height == c.height);
      CHECK(info.duration_s == Approx(2.0).margin(0.11));
      CHECK(info.fps == Approx(10.0).margin(0.01));
      CHECK(info.content_hash == HashBytes(bytes));
      CHECK(info.size_bytes == static_cast<int64_t>(bytes.size()));

      const FrameBatch& frames = decoded->frames;
      REQUIRE(frames.num_frames == 5);
      REQUIRE(frames.height == c.height);
      REQUIRE(frames.width == c.width);
      for (int i = 0; i < 5; ++i) {
        const double target = decoded->targets_s[i];
        const double ts = decoded->timestamps_s[i];
        CHECK(target == Approx(i * info.duration_s / 5));
        // The frame on screen at the target: at or before it, less than one interval before.
        CHECK(ts <= target + 1e-6);
        CHECK(target - ts < 0.1 + 1e-6);
        const int64_t k = std::llround(ts * 10);
        REQUIRE(k < ref_frames);
        const double diff = MeanAbsDiff(frames, i, &ref[k * frame_bytes]);
        INFO("frame " << i << " at " << ts << " s vs reference frame " << k);
        // Same decoder and converter as the tool: equal up to rounding (consecutive testsrc2
        // frames differ by about 1.0 on average, so this also tells neighbours apart).
        CHECK(diff < 0.3);
        if (k + 1 < ref_frames) CHECK(diff < MeanAbsDiff(frames, i, &ref[(k + 1) * frame_bytes]));
        if (k > 0) CHECK(diff < MeanAbsDiff(frames, i, &ref[(k - 1) * frame_bytes]));
      }
    }
  }
}

TEST_CASE("1x1 and odd-sized frames decode", "[unit][media]") {
  const std::string red1 = "color=c=red:s=16x16:r=10:d=1,scale=1:1";
  for (const auto& [name, codec] : std::vector<std::pair<std::string, std::string>>{
           {"one.mp4", "libx264"}, {"one.webm", "libvpx-vp9"}}) {
    DYNAMIC_SECTION(name) {
      std::vector<std::string> args = {"-f", "lavfi", "-i", red1, "-c:v", codec};
      if (codec == "libx264") args.insert(args.end(), {"-pix_fmt", "yuv444p"});
      const auto bytes = ReadFileBytes(Generate(name, args));
      PreprocessSpec siglip;  // 384x384 bicubic, mean/std 0.5
      auto decoded = DecodeBytes(bytes, 3, siglip);
      INFO((decoded.ok() ? "" : MessageOf(decoded.status())));
      REQUIRE(decoded.ok());
      CHECK(decoded->info.width == 1);
      CHECK(decoded->info.height == 1);
      REQUIRE(decoded->frames.height == 384);
      const float* f = decoded->frames.Frame(0);
      const size_t plane = 384 * 384;
      // Red (255, 0, 0) -> (1, -1, -1) after (x / 255 - 0.5) / 0.5, up to coding error.
      CHECK(f[0] == Approx(1.0).margin(0.05));
      CHECK(f[plane + 1000] == Approx(-1.0).margin(0.05));
      CHECK(f[2 * plane + 383 * 384] == Approx(-1.0).margin(0.05));
    }
  }
  SECTION("odd size 63x47 in yuv420p (VP9)") {
    const auto bytes = ReadFileBytes(
        Generate("odd.webm", {"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=1,scale=63:47", "-c:v",
                              "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8"}));
    auto decoded = DecodeBytes(bytes, 2);
    REQUIRE(decoded.ok());
    CHECK(decoded->frames.width == 63);
    CHECK(decoded->frames.height == 47);
    CHECK(decoded->info.pixel_format == "yuv420p");
  }
  SECTION("10-bit 4:2:2 (H.264 High 4:2:2)") {
    const auto bytes = ReadFileBytes(
        Generate("tenbit.mkv", {"-f", "lavfi", "-i", "color=c=0x3366cc:s=32x32:r=10:d=1", "-c:v",
                                "libx264", "-pix_fmt", "yuv422p10le"}));
    auto decoded = DecodeBytes(bytes, 2);
    INFO((decoded.ok() ? "" : MessageOf(decoded.status())));
    REQUIRE(decoded.ok());
    CHECK(decoded->info.pixel_format == "yuv422p10le");
    const auto mean = testing::MeanColour(decoded->frames, 1);
    CHECK(mean[0] == Approx(0x33).margin(4));
    CHECK(mean[1] == Approx(0x66).margin(4));
    CHECK(mean[2] == Approx(0xcc).margin(4));
  }
}

TEST_CASE("rotation metadata is applied as players do", "[unit][media]") {
  // Left half red, right half blue; the ffmpeg tool (autorotate) shows a rotate=90 tag with the
  // right half on top.
  const auto plain = Generate(
      "halves.mp4", {"-filter_complex",
                     "color=red:s=32x32:d=1:r=10[a];color=blue:s=32x32:d=1:r=10[b];[a][b]hstack",
                     "-c:v", "libx264", "-pix_fmt", "yuv444p"});
  const auto rotated =
      Generate("rotated.mp4", {"-i", plain.string(), "-c", "copy", "-metadata:s:v", "rotate=90"});
  const auto bytes = ReadFileBytes(rotated);
  auto decoded = DecodeBytes(bytes, 1);
  REQUIRE(decoded.ok());
  CHECK(decoded->info.rotation_degrees == 270);
  CHECK(decoded->info.width == 32);
  CHECK(decoded->info.height == 64);
  CHECK(decoded->info.coded_width == 64);
  REQUIRE(decoded->frames.width == 32);
  REQUIRE(decoded->frames.height == 64);
  const auto ref = ReferenceFrames(rotated);  // autorotated by the tool
  REQUIRE(ref.size() >= 32 * 64 * 3);
  CHECK(MeanAbsDiff(decoded->frames, 0, ref.data()) < 0.3);
  const float* f = decoded->frames.Frame(0);
  const size_t plane = 32 * 64;
  CHECK(f[2 * plane + 5 * 32 + 16] > 200);   // top: blue
  CHECK(f[0 * plane + 58 * 32 + 16] > 200);  // bottom: red
}

TEST_CASE("4K frames decode and the resolution limit names the size", "[unit][media]") {
  const auto bytes = ReadFileBytes(
      Generate("uhd.mp4", {"-f", "lavfi", "-i", "testsrc2=s=3840x2160:r=10:d=0.3", "-c:v",
                           "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"}));
  PreprocessSpec siglip;
  auto decoded = DecodeBytes(bytes, 2, siglip);
  INFO((decoded.ok() ? "" : MessageOf(decoded.status())));
  REQUIRE(decoded.ok());
  CHECK(decoded->info.width == 3840);
  CHECK(decoded->info.height == 2160);
  CHECK(decoded->frames.num_frames == 2);
  CHECK(decoded->frames.height == 384);

  MediaLimits limits;
  limits.max_width = 1920;
  limits.max_height = 1080;
  auto refused = DecodeBytes(bytes, 2, siglip, limits);
  REQUIRE(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(MessageOf(refused.status()), Catch::Contains("3840x2160") &&
                                              Catch::Contains("1920x1080") &&
                                              Catch::Contains("max_width"));
}

TEST_CASE("broken and non-video inputs give an error naming the cause", "[unit][media]") {
  const auto good = Generate("good.mp4", {"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=3", "-c:v",
                                          "libx264", "-pix_fmt", "yuv420p"});
  const auto good_bytes = ReadFileBytes(good);

  SECTION("audio only") {
    const auto bytes =
        ReadFileBytes(Generate("audio.m4a", {"-f", "lavfi", "-i", "sine=d=1", "-c:a", "aac"}));
    auto r = DecodeBytes(bytes);
    REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(r.status()),
               Catch::Contains("no video stream") && Catch::Contains("audio only"));
  }
  SECTION("zero length") {
    auto r = DecodeBytes({});
    REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(r.status()),
               Catch::Contains("not a media file") && Catch::Contains("empty"));
  }
  SECTION("garbage") {
    std::vector<uint8_t> junk(5000);
    std::mt19937 rng(7);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    auto r = DecodeBytes(junk);
    REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(r.status()), Catch::Contains("not a media file"));
  }
  SECTION("truncated mp4 without its index (moov at the end)") {
    std::vector<uint8_t> cut(good_bytes.begin(), good_bytes.begin() + good_bytes.size() / 2);
    auto r = DecodeBytes(cut);
    REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(r.status()), Catch::Contains("truncated"));
  }
  SECTION("truncated mp4 with its index first (faststart) names the time") {
    const auto fast = ReadFileBytes(
        Generate("fast.mp4", {"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=4", "-c:v", "libx264",
                              "-pix_fmt", "yuv420p", "-movflags", "+faststart"}));
    std::vector<uint8_t> cut(fast.begin(), fast.begin() + fast.size() * 3 / 4);
    auto r = DecodeBytes(cut, 8);
    REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(r.status()),
               Catch::Contains("truncated or corrupt at") && Catch::Contains("declares 4.00 s"));
  }
  SECTION("truncated webm") {
    const auto webm =
        ReadFileBytes(Generate("trunc.webm", {"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=4",
                                              "-c:v", "libvpx", "-b:v", "400k"}));
    std::vector<uint8_t> cut(webm.begin(), webm.begin() + webm.size() / 2);
    auto r = DecodeBytes(cut, 8);
    REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(r.status()), Catch::Contains("truncated or corrupt at"));
  }
  SECTION("bit flips: frames or an INVALID_ARGUMENT, never a crash") {
    std::mt19937 rng(12345);
    for (int trial = 0; trial < 20; ++trial) {
      auto bytes = good_bytes;
      for (int k = 0; k < 16; ++k) {
        const size_t at = 48 + rng() % (bytes.size() - 48);
        bytes[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
      }
      auto r = DecodeBytes(bytes, 4);
      if (r.ok()) {
        CHECK(r->frames.num_frames == 4);
      } else {
        INFO(MessageOf(r.status()));
        CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
        CHECK(!MessageOf(r.status()).empty());
      }
    }
  }
  SECTION("unsupported codec") {
    // Rename the sample entry 'avc1' to an unknown fourcc: the container is fine, the codec not.
    auto bytes = good_bytes;
    const std::string tag = "avc1";
    int renamed = 0;
    for (auto it = std::search(bytes.begin(), bytes.end(), tag.begin(), tag.end());
         it != bytes.end(); it = std::search(it, bytes.end(), tag.begin(), tag.end())) {
      std::copy_n("zzzz", 4, it);
      ++renamed;
    }
    REQUIRE(renamed >= 1);
    auto r = DecodeBytes(bytes);
    REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(r.status()), Catch::Contains("unsupported video codec"));
  }
  SECTION("a PNG renamed .mp4 is decoded as the image it is") {
    const auto png = Generate("still.png", {"-f", "lavfi", "-i", "color=c=0x3366cc:s=40x30",
                                            "-frames:v", "1", "-pix_fmt", "rgb24"});
    const auto renamed = testing::MediaDir() / "actually_png.mp4";
    testing::WriteFileBytes(renamed, ReadFileBytes(png));
    auto r = DecodeMedia(MediaSource::FromFile(testing::MediaDir(), "actually_png.mp4"), {},
                         RawPixels(), {});
    INFO((r.ok() ? "" : MessageOf(r.status())));
    REQUIRE(r.ok());
    CHECK(r->info.kind == MediaKind::kImage);
    CHECK(r->info.mime_type == "image/png");
    CHECK(r->frames.num_frames == 1);
    CHECK(r->frames.width == 40);
    const auto mean = testing::MeanColour(r->frames, 0);
    CHECK(mean[0] == Approx(0x33).margin(4));
    CHECK(mean[2] == Approx(0xcc).margin(4));
  }
}

TEST_CASE("still images decode through OpenCV", "[unit][media]") {
  for (const auto& [name, mime] :
       std::vector<std::pair<std::string, std::string>>{{"img.png", "image/png"},
                                                        {"img.jpg", "image/jpeg"},
                                                        {"img.webp", "image/webp"},
                                                        {"img.bmp", "image/bmp"}}) {
    DYNAMIC_SECTION(name) {
      const auto bytes = ReadFileBytes(Generate(
          name,
          {"-f", "lavfi", "-i", "color=c=0x3366cc:s=42x30,scale=41:29", "-frames:v", "1",
           "-pix_fmt", name == "img.png" ? "rgb24" : (name == "img.bmp" ? "bgr24" : "yuv420p")}));
      auto r = DecodeBytes(bytes, 4);
      INFO((r.ok() ? "" : MessageOf(r.status())));
      REQUIRE(r.ok());
      CHECK(r->info.kind == MediaKind::kImage);
      CHECK(r->info.mime_type == mime);
      CHECK(r->info.width == 41);
      CHECK(r->info.height == 29);
      REQUIRE(r->frames.num_frames == 1);
      const auto mean = testing::MeanColour(r->frames, 0);
      CHECK(mean[0] == Approx(0x33).margin(6));
      CHECK(mean[1] == Approx(0x66).margin(6));
      CHECK(mean[2] == Approx(0xcc).margin(6));
      auto probe = ProbeMedia(MediaSource::FromBytes(bytes), {});
      REQUIRE(probe.ok());
      CHECK(probe->width == 41);
      CHECK(probe->height == 29);
    }
  }
}

}  // namespace
}  // namespace framezip::media
