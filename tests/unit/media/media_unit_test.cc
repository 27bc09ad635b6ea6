// Pure parts of media/: sniffing, sampling plans, preprocessing geometry and arithmetic, file
// access under the media root, and the limits.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "media/anyres_tiles.h"
#include "media/file_access.h"
#include "media/frame_sampling.h"
#include "media/media.h"
#include "media/preprocess.h"
#include "media/resample.h"
#include "media/sniff.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/media/media_test_util.h"

namespace framezip::media {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST_CASE("sniffing recognizes containers and reads image sizes from headers", "[unit][media]") {
  std::string png("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\x01\x00\0\0\0\xc8", 24);
  auto r = SniffMedia(Bytes(png));
  CHECK(r.type == SniffedType::kPng);
  CHECK(r.is_still_image);
  CHECK(r.width == 256);
  CHECK(r.height == 200);
  CHECK(r.mime_type == "image/png");

  // JPEG: SOI, APP0 (skipped), SOF0 with height 0x01e0 (480) and width 0x0280 (640).
  std::string jpeg("\xff\xd8\xff\xe0\x00\x04\x00\x00\xff\xc0\x00\x11\x08\x01\xe0\x02\x80", 17);
  r = SniffMedia(Bytes(jpeg));
  CHECK(r.type == SniffedType::kJpeg);
  CHECK(r.width == 640);
  CHECK(r.height == 480);

  CHECK(SniffMedia(Bytes(std::string("\0\0\0\x18"
                                     "ftypisom",
                                     12)))
            .mime_type == "video/mp4");
  CHECK(SniffMedia(Bytes(std::string("\0\0\0\x14"
                                     "ftypqt  ",
                                     12)))
            .mime_type == "video/quicktime");
  CHECK(SniffMedia(Bytes(std::string("\x1a\x45\xdf\xa3\x9f\x42\x82\x84webm", 12))).mime_type ==
        "video/webm");
  CHECK(SniffMedia(Bytes(std::string("RIFF\x10\0\0\0AVI LIST", 16))).type == SniffedType::kAvi);
  CHECK(SniffMedia(Bytes(std::string("GIF89a\x20\x00\x10\x00", 10))).width == 32);
  CHECK(SniffMedia(Bytes("hello world")).type == SniffedType::kUnknown);
  CHECK(SniffMedia({}).type == SniffedType::kUnknown);
  // A header cut short: recognized, size unknown (never reads past the buffer).
  r = SniffMedia(Bytes(std::string("\x89PNG\r\n\x1a\n", 8)));
  CHECK(r.type == SniffedType::kPng);
  CHECK(r.width == 0);
}

TEST_CASE("sampling plans", "[unit][media]") {
  FrameSamplingSpec uniform;
  uniform.num_frames = 4;
  auto t = PlanSampleTimes(uniform, 10.0, 25.0, 250);
  REQUIRE(t.size() == 4);
  CHECK(t[1] == Approx(2.5));
  CHECK(t[3] == Approx(7.5));
  // A clip with fewer frames than asked returns each frame once.
  t = PlanSampleTimes(uniform, 0.3, 10.0, 3);
  CHECK(t.size() == 3);

  FrameSamplingSpec fps;
  fps.mode = FrameSamplingSpec::Mode::kFps;
  fps.fps = 1.0;
  fps.num_frames = 100;
  t = PlanSampleTimes(fps, 10.0, 30.0, 300);
  REQUIRE(t.size() == 10);
  CHECK(t[9] == Approx(9.0));
  fps.fps = 100.0;  // faster than the video: capped at the video's 30 fps
  fps.num_frames = 1000;
  CHECK(PlanSampleTimes(fps, 1.0, 30.0, 30).size() == 30);

  MediaLimits limits;
  limits.max_frames = 64;
  uniform.num_frames = 65;
  auto s = ValidateSamplingSpec(uniform, limits);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(MessageOf(s), Catch::Contains("65") && Catch::Contains("max_frames"));
  uniform.num_frames = 0;
  CHECK_FALSE(ValidateSamplingSpec(uniform, limits).ok());
  fps.fps = -1;
  fps.num_frames = 8;
  CHECK_FALSE(ValidateSamplingSpec(fps, limits).ok());
}

TEST_CASE("preprocessing geometry follows transformers", "[unit][media]") {
  PreprocessSpec clip;
  clip.resize = ResizeMode::kShortestEdge;
  clip.shortest_edge = 224;
  CHECK(PreprocessedSize(clip, 640, 480) == std::pair{224, 298});  // int(224 * 640 / 480)
  CHECK(PreprocessedSize(clip, 480, 640) == std::pair{298, 224});
  clip.crop_height = clip.crop_width = 224;
  CHECK(PreprocessedSize(clip, 640, 480) == std::pair{224, 224});
  PreprocessSpec none;
  none.resize = ResizeMode::kNone;
  CHECK(PreprocessedSize(none, 33, 17) == std::pair{17, 33});
  none.pad_to_square = true;
  CHECK(PreprocessedSize(none, 33, 17) == std::pair{33, 33});

  PreprocessSpec bad;
  bad.std = {0.5f, 0.0f, 0.5f};
  CHECK(ValidatePreprocessSpec(bad).code() == absl::StatusCode::kInvalidArgument);
  bad = {};
  bad.height = 0;
  CHECK_THAT(MessageOf(ValidatePreprocessSpec(bad)), Catch::Contains("height"));
}

TEST_CASE("preprocessing arithmetic: normalize, channel order, pad, crop", "[unit][media]") {
  // 4x2 image: left half (10, 20, 30), right half (200, 100, 0).
  RgbImage img;
  img.width = 4;
  img.height = 2;
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 4; ++x) {
      const uint8_t px[3] = {static_cast<uint8_t>(x < 2 ? 10 : 200),
                             static_cast<uint8_t>(x < 2 ? 20 : 100),
                             static_cast<uint8_t>(x < 2 ? 30 : 0)};
      img.pixels.insert(img.pixels.end(), px, px + 3);
    }
  }
  PreprocessSpec spec;
  spec.resize = ResizeMode::kNone;
  spec.mean = {0.5f, 0.25f, 0.0f};
  spec.std = {0.5f, 0.25f, 1.0f};
  std::vector<float> out(3 * 2 * 4);
  PreprocessImage(img.View(), spec, 2, 4, out.data());
  CHECK(out[0] == Approx((10 / 255.0 - 0.5) / 0.5));
  CHECK(out[8 + 3] == Approx((100 / 255.0 - 0.25) / 0.25));
  CHECK(out[16 + 0] == Approx(30 / 255.0));

  spec.channel_order = ChannelOrder::kBgr;  // channel 0 is blue, with blue's mean/std
  PreprocessImage(img.View(), spec, 2, 4, out.data());
  CHECK(out[0] == Approx(30 / 255.0));
  CHECK(out[16 + 3] == Approx((200 / 255.0 - 0.5) / 0.5));

  // Pad to square with the pad colour, image centred at (4 - 2) / 2 = 1.
  PreprocessSpec pad;
  pad.resize = ResizeMode::kNone;
  pad.pad_to_square = true;
  pad.pad_rgb = {127, 127, 127};
  pad.rescale_factor = 1.0;
  pad.mean = {0, 0, 0};
  pad.std = {1, 1, 1};
  std::vector<float> sq(3 * 4 * 4);
  PreprocessImage(img.View(), pad, 4, 4, sq.data());
  CHECK(sq[0] == 127);          // row 0: padding
  CHECK(sq[1 * 4 + 0] == 10);   // row 1: the image
  CHECK(sq[2 * 4 + 3] == 200);  // row 2: the image
  CHECK(sq[3 * 4 + 3] == 127);  // row 3: padding

  // Center crop 2x2 of the 4x2 image takes columns 1..2.
  PreprocessSpec crop = pad;
  crop.pad_to_square = false;
  crop.crop_height = 2;
  crop.crop_width = 2;
  std::vector<float> c(3 * 2 * 2);
  PreprocessImage(img.View(), crop, 2, 2, c.data());
  CHECK(c[0] == 10);
  CHECK(c[1] == 200);
}

TEST_CASE("anyres tiling: canvas, fitted size, centred padding, tile order", "[unit][media]") {
  PreprocessSpec spec;
  spec.height = spec.width = 4;
  spec.rescale_factor = 1.0;
  spec.mean = {0, 0, 0};
  spec.std = {1, 1, 1};
  spec.anyres_pinpoints = {{4, 4}, {4, 8}, {8, 4}, {8, 8}};
  REQUIRE(ValidatePreprocessSpec(spec).ok());
  // 6 wide x 2 tall: the 4x8 canvas keeps the most pixels; the width limits the scale (8/6), so
  // the height is ceil(2 * 8/6) = 3 and one row of padding goes below (divmod: the odd one down).
  const AnyresTiling t = PlanAnyresTiles(spec, 6, 2);
  CHECK(t.canvas_height == 4);
  CHECK(t.canvas_width == 8);
  CHECK(t.resized_height == 3);
  CHECK(t.resized_width == 8);
  CHECK(t.tiles_down == 1);
  CHECK(t.tiles_across == 2);
  CHECK(t.num_frames() == 3);

  // Left half red (200, 0, 0), right half blue (0, 0, 100): after the fit, the first tile is red
  // and the second blue down to row 2, and row 3 of both is the zero padding.
  RgbImage img;
  img.width = 6;
  img.height = 2;
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 6; ++x) {
      const uint8_t px[3] = {static_cast<uint8_t>(x < 3 ? 200 : 0), 0,
                             static_cast<uint8_t>(x < 3 ? 0 : 100)};
      img.pixels.insert(img.pixels.end(), px, px + 3);
    }
  }
  std::vector<float> out(static_cast<size_t>(t.num_frames()) * 3 * 4 * 4, -1.f);
  PreprocessAnyresImage(img.View(), spec, t, out.data());
  auto at = [&](int frame, int c, int y, int x) { return out[((frame * 3 + c) * 4 + y) * 4 + x]; };
  CHECK(at(1, 0, 0, 0) == 200);  // tile 1, red plane, top-left
  CHECK(at(1, 2, 1, 1) == 0);
  CHECK(at(2, 2, 1, 3) == 100);  // tile 2, blue plane
  CHECK(at(2, 0, 1, 3) == 0);
  for (int frame : {1, 2}) {
    for (int x = 0; x < 4; ++x) CHECK(at(frame, 0, 3, x) + at(frame, 2, 3, x) == 0);
  }
  // The base tile is the whole image squashed to 4x4: red on the left, blue on the right.
  CHECK(at(0, 0, 0, 0) > 150);
  CHECK(at(0, 2, 3, 3) > 75);

  // A tall image: 2 wide x 6 tall goes on the 8x4 canvas, 8 rows by ceil(2 * 8/6) = 3 columns,
  // and its one column of padding goes right (divmod(4 - 3, 2) = (0, 1)).
  const AnyresTiling tall = PlanAnyresTiles(spec, 2, 6);
  CHECK(tall.canvas_height == 8);
  CHECK(tall.canvas_width == 4);
  CHECK(tall.resized_width == 3);
  CHECK(tall.num_frames() == 3);
}

TEST_CASE("anyres specs are refused unless square exact tiles divide every canvas",
          "[unit][media]") {
  PreprocessSpec spec;
  spec.height = spec.width = 32;
  spec.anyres_pinpoints = {{32, 64}, {64, 32}};
  CHECK(ValidatePreprocessSpec(spec).ok());
  PreprocessSpec bad = spec;
  bad.anyres_pinpoints.push_back({48, 32});
  CHECK_THAT(MessageOf(ValidatePreprocessSpec(bad)), Catch::Contains("[48, 32]"));
  bad = spec;
  bad.width = 16;
  CHECK_THAT(MessageOf(ValidatePreprocessSpec(bad)), Catch::Contains("anyres_pinpoints"));
  bad = spec;
  bad.pad_to_square = true;
  CHECK(ValidatePreprocessSpec(bad).code() == absl::StatusCode::kInvalidArgument);
  bad = spec;
  bad.anyres_pinpoints.assign(kMaxAnyresPinpoints + 1, {32, 32});
  CHECK_THAT(MessageOf(ValidatePreprocessSpec(bad)), Catch::Contains("limit"));
}

TEST_CASE("resampling: identity at the same size, constant images stay constant", "[unit][media]") {
  RgbImage img;
  img.width = 7;
  img.height = 5;
  img.pixels.assign(7 * 5 * 3, 0);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 37);
  for (const auto r : {Resampler::kPil, Resampler::kTorchvision, Resampler::kTorchvisionFloat}) {
    for (const auto interp : {Interpolation::kBicubic, Interpolation::kBilinear}) {
      const RgbImage same = ResizeRgb(img.View(), 7, 5, interp, r);
      CHECK(same.pixels == img.pixels);
    }
    RgbImage flat;
    flat.width = 9;
    flat.height = 6;
    flat.pixels.assign(9 * 6 * 3, 77);
    for (const auto& [w, h] : {std::pair{3, 2}, std::pair{20, 13}, std::pair{1, 1}}) {
      const RgbImage out = ResizeRgb(flat.View(), w, h, Interpolation::kBicubic, r);
      REQUIRE(out.pixels.size() == static_cast<size_t>(w * h * 3));
      for (const uint8_t v : out.pixels) CHECK(v == 77);
    }
  }
}

TEST_CASE("file sources must stay under the media root", "[unit][media]") {
  framezip::testing::TempDir dir;
  const auto root = dir.path() / "root";
  std::filesystem::create_directories(root / "sub");
  testing::WriteFileBytes(root / "sub" / "a.bin", {1, 2, 3});
  testing::WriteFileBytes(dir.path() / "secret.bin", {9, 9});
  std::filesystem::create_symlink(dir.path() / "secret.bin", root / "escape.bin");
  std::filesystem::create_symlink(root / "sub" / "a.bin", root / "inside.bin");
  std::filesystem::create_directory_symlink(dir.path(), root / "up");

  auto ok = OpenUnderRoot(root, "sub/a.bin");
  REQUIRE(ok.ok());
  CHECK(ok->size_bytes == 3);
  CHECK(OpenUnderRoot(root, "inside.bin").ok());  // a symlink that stays inside is fine
  CHECK(OpenUnderRoot(root, (root / "sub/a.bin").string()).ok());

  for (const std::string& escape : std::vector<std::string>{
           "../secret.bin", "escape.bin", "up/secret.bin", "sub/../../secret.bin",
           (dir.path() / "secret.bin").string(), "/etc/passwd"}) {
    auto r = OpenUnderRoot(root, escape);
    INFO(escape);
    CHECK(r.status().code() == absl::StatusCode::kPermissionDenied);
    CHECK_THAT(MessageOf(r.status()), Catch::Contains("outside the media root"));
  }
  CHECK(OpenUnderRoot(root, "missing.mp4").status().code() == absl::StatusCode::kNotFound);
  CHECK(OpenUnderRoot(root, "sub").status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(OpenUnderRoot(root, "").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(OpenUnderRoot({}, "a").status().code() == absl::StatusCode::kInvalidArgument);
  // The error names what the client asked for, never where the root is.
  CHECK_THAT(MessageOf(OpenUnderRoot(root, "../secret.bin").status()),
             !Catch::Contains(root.string()));
}

TEST_CASE("limits: bytes, duration, frames, decode time, cancellation", "[unit][media]") {
  const auto bytes = testing::ReadFileBytes(
      testing::Generate("limits.mp4", {"-f", "lavfi", "-i", "testsrc2=s=64x48:r=10:d=3", "-c:v",
                                       "libx264", "-pix_fmt", "yuv420p"}));
  const auto source = MediaSource::FromBytes(bytes);
  FrameSamplingSpec sampling;
  sampling.num_frames = 4;
  const PreprocessSpec spec = testing::RawPixels();

  MediaLimits limits;
  limits.max_bytes = 1000;
  auto r = DecodeMedia(source, sampling, spec, limits);
  CHECK(r.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(MessageOf(r.status()), Catch::Contains("max_bytes") && Catch::Contains("1000"));

  limits = {};
  limits.max_duration_s = 2.0;
  r = DecodeMedia(source, sampling, spec, limits);
  CHECK(r.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(MessageOf(r.status()), Catch::Contains("3.0 s") && Catch::Contains("max_duration_s"));
  auto probe = ProbeMedia(source, limits);
  CHECK(probe.status().code() == absl::StatusCode::kResourceExhausted);

  limits = {};
  limits.max_decode_s = 0.0;
  r = DecodeMedia(source, sampling, spec, limits);
  CHECK(r.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_THAT(MessageOf(r.status()), Catch::Contains("max_decode_s"));

  limits = {};
  limits.max_output_bytes = 1000;
  r = DecodeMedia(source, sampling, spec, limits);
  CHECK(r.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(MessageOf(r.status()), Catch::Contains("max_output_bytes"));

  std::atomic<bool> cancel{true};
  DecodeOptions options;
  options.cancel = &cancel;
  r = DecodeMedia(source, sampling, spec, {}, options);
  CHECK(r.status().code() == absl::StatusCode::kCancelled);

  // Probe: metadata and hash, no frames.
  probe = ProbeMedia(source, {});
  REQUIRE(probe.ok());
  CHECK(probe->codec == "h264");
  CHECK(probe->duration_s == Approx(3.0).margin(0.11));
  CHECK(probe->frame_count == 30);
  CHECK(probe->content_hash == HashBytes(bytes));
  // A known hash is passed through without hashing again.
  options = {};
  options.known_content_hash = ContentHash{};
  r = DecodeMedia(source, sampling, spec, {}, options);
  REQUIRE(r.ok());
  CHECK(r->info.content_hash == ContentHash{});
}

}  // namespace
}  // namespace framezip::media
