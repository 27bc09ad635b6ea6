// engine/vision against transformers on a tiny random LLaVA-OneVision checkpoint (legacy key
// layout, as save_pretrained writes it), loaded through engine/model. The data is produced by
// make_vision_golden.py next to this file (transformers/torch versions in manifest.json).
//
// Error measure: max |got - want| / max |want| over the tensor, ≤ 1e-4 with f32 weights and
// ≤ 2e-2 with bf16 weights (the reference then also rounds every activation to bf16; we keep f32).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "engine/ops/cast.h"
#include "engine/vision/llava_vision.h"
#include "engine/vision/vision_tower.h"
#include "tests/testing/compare.h"
#include "tests/testing/temp_dir.h"

namespace framezip::engine::vision {
namespace {

struct Golden {
  model::LlavaConfig config;
  model::ModelWeights checkpoint;
  model::SafetensorsModel expected;
  LlavaVisionWeights weights;
};

Golden Load(const std::string& name) {
  const auto dir = testing::SourceDir() / "tests/unit/engine/vision/golden/data" / name;
  INFO("golden " << dir.string());
  auto config = model::LoadLlavaConfig(dir);
  REQUIRE(config.ok());
  auto checkpoint = model::ModelWeights::Load(dir, *config);
  if (!checkpoint.ok()) FAIL(MessageOf(checkpoint.status()));
  auto expected = model::SafetensorsModel::OpenFile(dir / "expected.safetensors");
  REQUIRE(expected.ok());
  auto weights = BindLlavaVisionWeights(*config, *checkpoint);
  if (!weights.ok()) FAIL(MessageOf(weights.status()));
  return {*config, *checkpoint, *expected, *weights};
}

Tensor Expected(const Golden& g, const std::string& name) {
  auto t = g.expected.Get(name);
  if (!t.ok()) FAIL(MessageOf(t.status()));
  return *t;
}

// Pixel inputs are stored as F16 (exact values); the vision path takes f32.
Tensor Pixels(const Golden& g, const std::string& name) {
  const Tensor stored = Expected(g, name);
  auto f32 = Tensor::Empty(stored.shape(), DType::kF32);
  REQUIRE(f32.ok());
  REQUIRE(ops::Cast(stored, *f32).ok());
  return *f32;
}

// Max error relative to the tensor's largest magnitude.
void ExpectMatches(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  REQUIRE(got.numel() == want.numel());
  const auto w = testing::ToFloatVector(want);
  double scale = 0;
  for (float v : w) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  const auto r = testing::CompareValues(testing::ToFloatVector(got),
                                        std::vector<double>(w.begin(), w.end()), {tol * scale, 0});
  INFO(what << ": max error " << r.max_abs_error / scale << " of max |want| " << scale << "; "
            << r.message);
  CHECK(r.ok);
}

void CheckGolden(const std::string& name, double tol) {
  const Golden g = Load(name);
  const int64_t L = g.config.vision.num_hidden_layers;
  const Tensor videos = Pixels(g, "pixel_values_videos");  // [1, F, 3, S, S]
  auto frames = videos.Reshape({videos.dim(1), videos.dim(2), videos.dim(3), videos.dim(4)});
  REQUIRE(frames.ok());

  SECTION("tower hidden_states, no post_layernorm on the last") {
    std::vector<int64_t> layers;
    for (int64_t k = 0; k <= L; ++k) layers.push_back(k);
    auto hs = VisionTowerHiddenStates(g.config.vision, g.weights.tower, *frames, layers);
    REQUIRE(hs.ok());
    for (int64_t k = 0; k <= L; ++k) {
      ExpectMatches((*hs)[k], Expected(g, fmt::format("hidden_states.{}", k)), tol,
                    fmt::format("hidden_states[{}]", k));
    }
  }
  SECTION("get_video_features: pooled frames + one newline") {
    auto video = EncodeVideo(g.config, g.weights, *frames);
    REQUIRE(video.ok());
    CHECK(video->dim(0) == *VideoTokenCount(g.config, frames->dim(0)));
    ExpectMatches(*video, Expected(g, "video_features"), tol, "video_features");
  }
  SECTION("get_image_features of a multi-image sample: tile + newline per image") {
    const Tensor images = Pixels(g, "pixel_values_images");  // [2, 1, 3, S, S]
    auto tiles = images.Reshape({images.dim(0), images.dim(2), images.dim(3), images.dim(4)});
    REQUIRE(tiles.ok());
    auto out = EncodeImagesBaseResolution(g.config, g.weights, *tiles);
    REQUIRE(out.ok());
    CHECK(out->dim(0) == 2 * BaseImageTokenCount(g.config));
    ExpectMatches(*out, Expected(g, "image_features"), tol, "image_features");
  }
  SECTION("get_image_features of single-image samples: anyres unpad, shrink, row newlines") {
    for (int i = 0; g.expected.Has(fmt::format("anyres.{}.features", i)); ++i) {
      const Tensor tiles = Pixels(g, fmt::format("anyres.{}.pixel_values", i));
      const Tensor size = Expected(g, fmt::format("anyres.{}.image_size", i));
      REQUIRE(size.dtype() == DType::kI64);
      const int64_t h = size.data<int64_t>()[0], w = size.data<int64_t>()[1];
      INFO("anyres image " << h << "x" << w << ", " << tiles.dim(0) << " tiles");
      auto out = EncodeImageAnyres(g.config, g.weights, tiles, h, w);
      if (!out.ok()) FAIL(MessageOf(out.status()));
      const Tensor want = Expected(g, fmt::format("anyres.{}.features", i));
      CHECK(*AnyresImageTokenCount(g.config, h, w) == want.dim(0));
      ExpectMatches(*out, want, tol, fmt::format("anyres.{}.features", i));
    }
  }
}

TEST_CASE("Vision path matches transformers, f32 weights", "[golden][engine][vision]") {
  CheckGolden("tiny_ov_f32", 1e-4);
}

TEST_CASE("Vision path matches transformers, bf16 weights", "[golden][engine][vision]") {
  CheckGolden("tiny_ov_bf16", 2e-2);
}

// LLaVA-1.5 layout: CLIP tower (class token, pre_layrnorm, quick_gelu), vision_feature_layer -2,
// "default" drops CLS, no image_newline.
TEST_CASE("CLIP tower and LLaVA image features match transformers", "[golden][engine][vision]") {
  const Golden g = Load("tiny_llava_clip_f32");
  REQUIRE(g.config.vision.arch == model::VisionArch::kClip);
  const Tensor pixels = Pixels(g, "pixel_values");
  const int64_t L = g.config.vision.num_hidden_layers;
  // Feature layer -2 binds L - 1 layers; hidden_states up to L - 1 are comparable.
  std::vector<int64_t> layers;
  for (int64_t k = 0; k < L; ++k) layers.push_back(k);
  auto hs = VisionTowerHiddenStates(g.config.vision, g.weights.tower, pixels, layers);
  REQUIRE(hs.ok());
  for (int64_t k = 0; k < L; ++k) {
    ExpectMatches((*hs)[k], Expected(g, fmt::format("hidden_states.{}", k)), 1e-4,
                  fmt::format("hidden_states[{}]", k));
  }
  auto out = EncodeImagesBaseResolution(g.config, g.weights, pixels);
  REQUIRE(out.ok());
  CHECK(BaseImageTokenCount(g.config) == g.config.vision.num_patches());
  ExpectMatches(*out, Expected(g, "image_features"), 1e-4, "image_features");
}

}  // namespace
}  // namespace framezip::engine::vision
