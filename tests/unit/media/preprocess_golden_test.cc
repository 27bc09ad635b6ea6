// media's preprocessing against Hugging Face's own processors (SigLIP and CLIP image processors,
// torchvision and PIL backends, and the LLaVA-OneVision video processor and its image processor's
// anyres tiles). Goldens come from
// tools/golden/gen_media_goldens.py (manifest.json records the versions); inputs are committed
// PNGs read through media's own image path. Tolerance: 1e-2 per value.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <tuple>

#include "media/media.h"
#include "tests/testing/temp_dir.h"

namespace framezip::media {
namespace {

const std::filesystem::path& GoldenDir() {
  static const auto dir = framezip::testing::SourceDir() / "tests/data/golden/media";
  return dir;
}

std::vector<float> ReadF32(const std::string& name) {
  std::ifstream in(GoldenDir() / name, std::ios::binary);
  REQUIRE(in.good());
  in.seekg(0, std::ios::end);
  const auto bytes = static_cast<size_t>(in.tellg());
  in.seekg(0);
  std::vector<float> out(bytes / sizeof(float));
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(bytes));
  return out;
}

PreprocessSpec Siglip(Resampler r) {
  PreprocessSpec s;
  s.resize = ResizeMode::kExact;
  s.height = s.width = 32;
  s.resampler = r;
  return s;  // bicubic, mean/std 0.5
}

PreprocessSpec Clip(Resampler r) {
  PreprocessSpec s;
  s.resize = ResizeMode::kShortestEdge;
  s.shortest_edge = 24;
  s.crop_height = s.crop_width = 24;
  s.resampler = r;
  s.mean = {0.48145466f, 0.4578275f, 0.40821073f};
  s.std = {0.26862954f, 0.26130258f, 0.27577711f};
  return s;
}

// Runs media on one committed input PNG and compares with `golden` starting at `offset`; returns
// how many floats media produced.
size_t CompareOne(const std::string& input, const PreprocessSpec& spec,
                const std::vector<float>& golden, size_t offset) {
  auto decoded = DecodeMedia(MediaSource::FromFile(GoldenDir(), input), {}, spec, {});
  INFO(input << ": " << (decoded.ok() ? "" : MessageOf(decoded.status())));
  REQUIRE(decoded.ok());
  const auto& got = decoded->frames.data;
  REQUIRE(offset + got.size() <= golden.size());
  double max_diff = 0, sum_diff = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - golden[offset + i]);
    sum_diff += d;
    if (d > max_diff) {
      max_diff = d;
      worst = i;
    }
  }
  INFO("max |diff| " << max_diff << " at " << worst << " (got " << got[worst] << ", want "
                     << golden[offset + worst] << "), mean " << sum_diff / got.size());
  CHECK(max_diff <= 1e-2);
  CHECK(sum_diff / static_cast<double>(got.size()) < 1e-3);
  return got.size();
}

TEST_CASE("preprocessing matches transformers' SigLIP and CLIP image processors",
          "[golden][media]") {
  for (const char* image : {"down_67x45", "up_19x27", "wide_80x30"}) {
    for (const auto& [backend, resampler] :
         {std::pair{"torchvision", Resampler::kTorchvision}, std::pair{"pil", Resampler::kPil}}) {
      const std::string input = std::string("inputs/") + image + ".png";
      DYNAMIC_SECTION("siglip " << backend << " " << image) {
        const auto golden = ReadF32(std::string("siglip_") + backend + "_" + image + ".f32");
        REQUIRE(golden.size() == 3 * 32 * 32);
        CompareOne(input, Siglip(resampler), golden, 0);
      }
      DYNAMIC_SECTION("clip " << backend << " " << image) {
        const auto golden = ReadF32(std::string("clip_") + backend + "_" + image + ".f32");
        REQUIRE(golden.size() == 3 * 24 * 24);
        CompareOne(input, Clip(resampler), golden, 0);
      }
    }
  }
}

TEST_CASE("preprocessing matches transformers' LLaVA-OneVision video processor",
          "[golden][media]") {
  const auto golden = ReadF32("llava_onevision_video.f32");
  REQUIRE(golden.size() == 4 * 3 * 32 * 32);
  for (int f = 0; f < 4; ++f) {
    CompareOne("inputs/video_frame" + std::to_string(f) + ".png", Siglip(Resampler::kTorchvision),
               golden, static_cast<size_t>(f) * 3 * 32 * 32);
  }
}

TEST_CASE("anyres tiles match transformers' LLaVA-OneVision image processor", "[golden][media]") {
  // 32-pixel tiles, canvases of 1..3 x 1..3 tiles (gen_media_goldens.py's image_grid_pinpoints).
  std::vector<std::pair<int64_t, int64_t>> pinpoints;
  for (int64_t h = 1; h <= 3; ++h) {
    for (int64_t w = 1; w <= 3; ++w) pinpoints.emplace_back(32 * h, 32 * w);
  }
  // (image, backend, tiles): the base tile plus the chosen canvas's, as the processor emits them.
  const std::tuple<const char*, const char*, size_t> cases[] = {
      {"down_67x45", "torchvision", 7},  {"up_19x27", "torchvision", 2},
      {"wide_80x30", "torchvision", 4},  {"large_150x110", "torchvision", 10},
      {"tall_40x100", "torchvision", 7}, {"wide_80x30", "pil", 4}};
  for (const auto& [image, backend, tiles] : cases) {
    DYNAMIC_SECTION(backend << " " << image) {
      PreprocessSpec spec = Siglip(std::string(backend) == "pil" ? Resampler::kPil
                                                                  : Resampler::kTorchvision);
      spec.anyres_pinpoints = pinpoints;
      const auto golden = ReadF32(std::string("anyres_") + backend + "_" + image + ".f32");
      REQUIRE(golden.size() == tiles * 3 * 32 * 32);
      CHECK(CompareOne(std::string("inputs/") + image + ".png", spec, golden, 0) == golden.size());
    }
  }
}

}  // namespace
}  // namespace framezip::media
