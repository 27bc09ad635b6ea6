// The vision tower, projector and OV video/image paths against the f64 reference of
// vision_reference.cc, on tiny random configs (SigLIP- and CLIP-shaped), f32 and bf16 weights;
// the whole tower also on every device present (tests/unit/engine/ops/device_cases.h).
#include "engine/vision/vision_tower.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>

#include "engine/ops/gemm_amx.h"
#include "engine/runtime/weight_format.h"
#include "engine/synthetic/random_vision_weights.h"
#include "engine/synthetic/vision_bench.h"
#include "engine/vision/anyres.h"
#include "engine/vision/llava_vision.h"
#include "engine/vision/projector.h"
#include "tests/testing/compare.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/ops/device_cases.h"
#include "tests/unit/engine/vision/vision_reference.h"

namespace framezip::engine::vision {
namespace {

using model::Activation;
using model::FeatureSelect;
using model::LlavaConfig;

// SigLIP-like: no CLS, conv bias, gelu_tanh; image 32 / patch 6 leaves 2 pixels unused like
// 384 / 14 leaves 6. G = 5, so pooling is 5 -> 3 (odd, ceil).
LlavaConfig TinySiglip() {
  LlavaConfig c;
  c.arch = model::LlavaArch::kLlavaOnevision;
  c.model_type = "llava_onevision";
  c.vision.arch = model::VisionArch::kSiglip;
  c.vision.hidden_size = 32;
  c.vision.intermediate_size = 48;
  c.vision.num_hidden_layers = 3;
  c.vision.num_attention_heads = 4;
  c.vision.head_dim = 8;
  c.vision.image_size = 32;
  c.vision.patch_size = 6;
  c.vision.layer_norm_eps = 1e-6;
  c.vision.hidden_act = Activation::kGeluTanh;
  c.text.hidden_size = 24;
  c.vision_feature_layers = {-1};
  c.vision_feature_select_strategy = FeatureSelect::kFull;
  c.projector_hidden_act = Activation::kGeluErf;
  c.projector_bias = true;
  c.has_image_newline = true;
  return c;
}

// LLaVA-1.5-like: CLIP tower (CLS + pre_layrnorm, no conv bias, quick_gelu, eps 1e-5), feature
// layer -2, "default" (drop CLS), no image_newline.
LlavaConfig TinyClip() {
  LlavaConfig c = TinySiglip();
  c.arch = model::LlavaArch::kLlava;
  c.model_type = "llava";
  c.vision.arch = model::VisionArch::kClip;
  c.vision.intermediate_size = 40;
  c.vision.num_attention_heads = 2;
  c.vision.head_dim = 16;
  c.vision.layer_norm_eps = 1e-5;
  c.vision.hidden_act = Activation::kQuickGelu;
  c.vision_feature_layers = {-2};
  c.vision_feature_select_strategy = FeatureSelect::kDefault;
  c.has_image_newline = false;
  return c;
}

Tensor RandomPixels(int64_t N, const LlavaConfig& c, std::mt19937_64& rng) {
  const int64_t S = c.vision.image_size;
  auto v = testing::RandomNormal(static_cast<size_t>(N * 3 * S * S), rng, 0.6f);
  auto t = Tensor::Empty({N, 3, S, S}, DType::kF32);
  FZ_CHECK(t.ok());
  std::copy(v.begin(), v.end(), t->data<float>());
  return *t;
}

std::vector<float> Values(const Tensor& t) { return testing::ToFloatVector(t); }

// f32 activations vs f64: a few ulps per op; the error is relative to the tensor's scale.
void ExpectClose(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  REQUIRE(got.numel() == static_cast<int64_t>(want.size()));
  double rms = 0;
  for (double v : want) rms += v * v;
  rms = std::sqrt(rms / static_cast<double>(want.size()));
  const auto r = testing::CompareValues(Values(got), want, {2e-5 * rms, 1e-4});
  INFO(what << ": " << r.message << " (max abs " << r.max_abs_error << ", rms " << rms << ")");
  CHECK(r.ok);
}

TEST_CASE("Vision tower hidden states match the f64 reference", "[unit][engine][vision]") {
  ops::cpu::ScopedF32Gemm f32_gemm;  // an f32 reference; the AMX path: vision golden bf16
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (const LlavaConfig& config : {TinySiglip(), TinyClip()}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      INFO((config.vision.arch == model::VisionArch::kSiglip ? "siglip" : "clip")
           << " weights " << DTypeName(dtype));
      // The full tower: bind every layer by asking for the last one.
      LlavaConfig all = config;
      all.vision_feature_layers = {-1};
      auto ckpt = RandomVisionCheckpoint(all, dtype, seed + 7, 0.15f);
      REQUIRE(ckpt.ok());
      auto weights = BindLlavaVisionWeights(all, MapLookup(*ckpt));
      REQUIRE(weights.ok());
      const Tensor pixels = RandomPixels(3, config, rng);
      VisionRunOptions options;
      options.max_images_per_batch = 2;  // two batches: 2 + 1 images
      const std::vector<int64_t> layers = {0, 1, 2, 3};
      auto hs = VisionTowerHiddenStates(config.vision, weights->tower, pixels, layers, options);
      REQUIRE(hs.ok());
      const auto want = testing::ReferenceHiddenStates(config.vision, *ckpt, Values(pixels), 3);
      for (size_t i = 0; i < layers.size(); ++i) {
        ExpectClose((*hs)[i], want[layers[i]], fmt::format("hidden_states[{}]", layers[i]));
      }
    }
  }
}

// The tower of the device case below: hidden 64, 4 heads of 16, 2 layers, images of 128 pixels
// in patches of 14 (9 × 14 + 2 trailing pixels the conv ignores: 81 patches, enough rows (>= 64)
// that bf16 weights take the GPU's tensor-core attention path).
LlavaConfig DeviceCaseTower(model::VisionArch arch) {
  LlavaConfig c = arch == model::VisionArch::kClip ? TinyClip() : TinySiglip();
  c.vision.hidden_size = 64;
  c.vision.intermediate_size = 160;
  c.vision.num_hidden_layers = 2;
  c.vision.num_attention_heads = 4;
  c.vision.head_dim = 16;
  c.vision.image_size = 128;
  c.vision.patch_size = 14;
  c.vision_feature_layers = {-1};  // bind every layer
  return c;
}

// Checks a device's hidden state against f64 under the bound that device's arithmetic allows.
void CheckHiddenStateOn(const Device& device, DType dtype, const Tensor& got,
                        const std::vector<double>& want) {
  if (device.is_cpu()) {
    // f32 GEMMs (ScopedF32Gemm) and f32 activations: a few ulps per op, as the test above.
    ExpectClose(got, want, "CPU");
    return;
  }
  // Relative to the output's RMS (a wrong row, head or mask errs by the RMS itself), the bounds
  // of the whole-decoder test (tests/unit/engine/llm/decoder_device_test.cc), whose ops these are
  // too. f32 weights: summation orders and the last bit of exp/tanh (attention, GEMMs, norms, GELU)
  // differ: 1e-3 per element, 3e-4 in relative L2. bf16 weights: every GEMM on the GPU rounds its
  // f32 input to bf16 (~1e-3 of the output's RMS per GEMM), compounded over the patch GEMM and 2
  // layers of 6 GEMMs, and attention runs on bf16 tensor cores (head_dim 16 zero-padded to 64;
  // tests/unit/engine/attention_cuda_test.cc): 1e-1 per element, 3e-2 in relative L2.
  const test::RmsTolerance tol =
      dtype == DType::kF32 ? test::RmsTolerance{1e-3, 3e-4} : test::RmsTolerance{1e-1, 3e-2};
  test::CheckWithinRmsOf(got, want, tol);
}

TEST_CASE("The vision tower on every device matches the f64 reference",
          "[unit][engine][vision][devices]") {
  ops::cpu::ScopedF32Gemm f32_gemm;  // the CPU's f32 GEMMs (AMX would round inputs to bf16)
  const auto arch = GENERATE(model::VisionArch::kSiglip, model::VisionArch::kClip);
  const DType dtype = GENERATE(DType::kF32, DType::kBF16);
  CAPTURE(arch == model::VisionArch::kClip ? "clip" : "siglip", DTypeName(dtype));
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const LlavaConfig config = DeviceCaseTower(arch);
  auto ckpt = RandomVisionCheckpoint(config, dtype, seed + 13, 0.15f);
  REQUIRE(ckpt.ok());
  auto weights = BindLlavaVisionWeights(config, MapLookup(*ckpt));
  REQUIRE(weights.ok());
  // 5 images in batches of 2: two full batches and a partial one.
  const int64_t S = config.vision.image_size;
  const auto noise = testing::RandomNormal(static_cast<size_t>(5 * 3 * S * S), rng, 1.f);
  Tensor pixels = *Tensor::Empty({5, 3, S, S}, DType::kF32);
  std::copy(noise.begin(), noise.end(), pixels.data<float>());
  const std::vector<int64_t> layers = {0, 2, 1};  // embeddings, last, middle; out of order
  const VisionRunOptions options{.max_images_per_batch = 2};
  const auto want = testing::ReferenceHiddenStates(config.vision, *ckpt, Values(pixels), 5);
  test::ForEachDevice([&](const Device& device) {
    auto on_device = VisionTowerWeightsOn(weights->tower, device);
    INFO((on_device.ok() ? "" : MessageOf(on_device.status())));
    REQUIRE(on_device.ok());
    auto got = VisionTowerHiddenStates(config.vision, *on_device, pixels, layers, options);
    INFO((got.ok() ? "" : MessageOf(got.status())));
    REQUIRE(got.ok());
    REQUIRE(got->size() == layers.size());
    for (size_t i = 0; i < layers.size(); ++i) {
      INFO("hidden_states[" << layers[i] << "]");
      REQUIRE((*got)[i].device().is_cpu());  // every hidden state asked for comes to the host
      REQUIRE((*got)[i].numel() == static_cast<int64_t>(want[layers[i]].size()));
      CheckHiddenStateOn(device, dtype, (*got)[i], want[layers[i]]);
    }
  });
}

TEST_CASE("A tower whose weights VisionTowerWeightsOn copied gives the same hidden states",
          "[unit][engine][vision]") {
  // On the CPU the copy is a deep copy: every tensor the tower reads must be carried over (a
  // missing one fails the run), and the results must not move by a bit. The GPU side of the same
  // path is the device case above.
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (const LlavaConfig& config : {TinySiglip(), TinyClip()}) {
    INFO((config.vision.arch == model::VisionArch::kSiglip ? "siglip" : "clip"));
    LlavaConfig all = config;
    all.vision_feature_layers = {-1};
    auto ckpt = RandomVisionCheckpoint(all, DType::kBF16, seed + 11, 0.15f);
    REQUIRE(ckpt.ok());
    auto weights = BindLlavaVisionWeights(all, MapLookup(*ckpt));
    REQUIRE(weights.ok());
    auto copied = VisionTowerWeightsOn(weights->tower, Device::Cpu());
    REQUIRE(copied.ok());
    CHECK(copied->patch_weight.raw_data() != weights->tower.patch_weight.raw_data());
    const Tensor pixels = RandomPixels(3, config, rng);
    const std::vector<int64_t> layers = {3, 0};
    auto want = VisionTowerHiddenStates(config.vision, weights->tower, pixels, layers);
    auto got = VisionTowerHiddenStates(config.vision, *copied, pixels, layers);
    REQUIRE(want.ok());
    REQUIRE(got.ok());
    for (size_t i = 0; i < layers.size(); ++i) {
      CHECK(std::memcmp((*got)[i].raw_data(), (*want)[i].raw_data(), (*want)[i].nbytes()) == 0);
    }
  }
}

TEST_CASE("Feature layers, selection and projector match the reference", "[unit][engine][vision]") {
  ops::cpu::ScopedF32Gemm f32_gemm;  // an f32 reference; the AMX path: vision golden bf16
  const uint64_t seed = testing::TestSeed() + 1;
  std::mt19937_64 rng(seed);
  LlavaConfig multi = TinySiglip();
  multi.vision_feature_layers = {-1, 0, -3};  // a list: concatenated in this order
  multi.vision_feature_layer_is_list = true;
  for (const LlavaConfig& config : {TinySiglip(), TinyClip(), multi}) {
    auto ckpt = RandomVisionCheckpoint(config, DType::kBF16, seed, 0.15f);
    REQUIRE(ckpt.ok());
    auto weights = BindLlavaVisionWeights(config, MapLookup(*ckpt));
    REQUIRE(weights.ok());
    const Tensor pixels = RandomPixels(2, config, rng);
    auto features = VisionTowerFeatures(config, weights->tower, pixels);
    REQUIRE(features.ok());
    CHECK(features->shape() ==
          Shape{2, SelectedTokensPerImage(config), config.projector_input_dim()});
    const auto want = testing::ReferenceFeatures(config, *ckpt, Values(pixels), 2);
    ExpectClose(*features, want, "features");
    auto projected = Project(config, weights->projector, *features);
    REQUIRE(projected.ok());
    CHECK(projected->shape() == Shape{2, SelectedTokensPerImage(config), config.text.hidden_size});
    ExpectClose(*projected, testing::ReferenceProject(config, *ckpt, want), "projected");
  }
}

TEST_CASE("EncodeVideo pools after the projector, one final newline", "[unit][engine][vision]") {
  ops::cpu::ScopedF32Gemm f32_gemm;  // an f32 reference; the AMX path: vision golden bf16
  const uint64_t seed = testing::TestSeed() + 2;
  std::mt19937_64 rng(seed);
  const LlavaConfig config = TinySiglip();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    auto ckpt = RandomVisionCheckpoint(config, dtype, seed, 0.15f);
    REQUIRE(ckpt.ok());
    auto weights = BindLlavaVisionWeights(config, MapLookup(*ckpt));
    REQUIRE(weights.ok());
    const int64_t F = 3;
    const Tensor frames = RandomPixels(F, config, rng);
    VisionRunOptions options;
    options.max_images_per_batch = 2;
    auto video = EncodeVideo(config, *weights, frames, options);
    REQUIRE(video.ok());
    auto count = VideoTokenCount(config, F);
    REQUIRE(count.ok());
    CHECK(*count == F * 3 * 3 + 1);  // G = 5 -> ceil(5/2) = 3
    CHECK(video->shape() == Shape{*count, config.text.hidden_size});
    ExpectClose(*video, testing::ReferenceVideo(config, *ckpt, Values(frames), F), "video");
  }
}

TEST_CASE("Base-resolution images: projected tile, then one newline", "[unit][engine][vision]") {
  const uint64_t seed = testing::TestSeed() + 3;
  std::mt19937_64 rng(seed);
  for (const LlavaConfig& config : {TinySiglip(), TinyClip()}) {
    auto ckpt = RandomVisionCheckpoint(config, DType::kF32, seed, 0.15f);
    REQUIRE(ckpt.ok());
    auto weights = BindLlavaVisionWeights(config, MapLookup(*ckpt));
    REQUIRE(weights.ok());
    const Tensor images = RandomPixels(2, config, rng);
    auto out = EncodeImagesBaseResolution(config, *weights, images);
    REQUIRE(out.ok());
    const int64_t per_image = BaseImageTokenCount(config), H = config.text.hidden_size;
    CHECK(per_image == (config.has_image_newline ? 26 : 25));
    REQUIRE(out->shape() == Shape{2 * per_image, H});
    const auto proj = testing::ReferenceProject(
        config, *ckpt, testing::ReferenceFeatures(config, *ckpt, Values(images), 2));
    std::vector<double> want;
    for (int64_t n = 0; n < 2; ++n) {
      const int64_t T = SelectedTokensPerImage(config);
      want.insert(want.end(), proj.begin() + n * T * H, proj.begin() + (n + 1) * T * H);
      if (config.has_image_newline) {
        const auto newline = testing::ToFloatVector(ckpt->at("model.image_newline"));
        want.insert(want.end(), newline.begin(), newline.end());
      }
    }
    ExpectClose(*out, want, "image features");
  }
}

TEST_CASE("Visual token counts match the processor's expansion", "[unit][engine][vision]") {
  // LLaVA-OneVision with SigLIP-384/14: 27x27 patches, pooled to 14x14 (docs/models.md §2.3).
  LlavaConfig ov = TinySiglip();
  ov.vision.image_size = 384;
  ov.vision.patch_size = 14;
  CHECK(PooledGridSide(ov.vision) == 14);
  CHECK(*VideoTokenCount(ov, 1) == 197);
  CHECK(*VideoTokenCount(ov, 8) == 8 * 196 + 1);
  CHECK(*VideoTokenCount(ov, 32) == 6273);
  CHECK(BaseImageTokenCount(ov) == 730);
  CHECK(VideoTokenCount(ov, 0).status().code() == absl::StatusCode::kInvalidArgument);
  // LLaVA-1.5: CLIP-336/14 (577 positions), "default" drops CLS, no newline: 576.
  LlavaConfig llava = TinyClip();
  llava.vision.image_size = 336;
  llava.vision.patch_size = 14;
  CHECK(BaseImageTokenCount(llava) == 576);
  CHECK(VideoTokenCount(llava, 4).status().code() == absl::StatusCode::kUnimplemented);
}

TEST_CASE("Anyres token counts match the processor's examples", "[unit][engine][vision]") {
  // The llava-hf OV layout: 384-pixel tiles, 36 pinpoints h-major, anyres_max_9. The cases are
  // the table of docs/models.md §2.3.
  LlavaConfig ov = TinySiglip();
  ov.vision.image_size = 384;
  ov.vision.patch_size = 14;
  ov.anyres_max_tiles = 9;
  for (int64_t h : {384, 768, 1152, 1536, 1920, 2304})
    for (int64_t w : {384, 768, 1152, 1536, 1920, 2304}) ov.image_grid_pinpoints.push_back({h, w});
  struct Case {
    int64_t h, w, canvas_h, canvas_w, tokens;
  };
  const Case cases[] = {{384, 384, 384, 384, 1485},     {480, 640, 768, 768, 2929},
                        {640, 480, 768, 768, 2943},     {768, 768, 768, 768, 3699},
                        {1024, 1024, 1152, 1152, 7371}, {899, 1024, 1152, 1152, 6551},
                        {720, 1280, 768, 1536, 5967},   {1080, 1920, 1152, 1920, 7269},
                        {2000, 3000, 1536, 2304, 7329}, {4000, 500, 2304, 384, 4293}};
  for (const Case& c : cases) {
    INFO(c.h << "x" << c.w);
    auto layout = ComputeAnyresLayout(ov, c.h, c.w);
    REQUIRE(layout.ok());
    CHECK(layout->canvas_h == c.canvas_h);
    CHECK(layout->canvas_w == c.canvas_w);
    CHECK(layout->num_tokens() == c.tokens);
    CHECK(*AnyresImageTokenCount(ov, c.h, c.w) == c.tokens);
  }
  // 899x1024: 3x3 tiles, 81x81 grid unpadded to 71x81, no shrink (docs/models.md §1.7).
  auto a = ComputeAnyresLayout(ov, 899, 1024);
  REQUIRE(a.ok());
  CHECK(a->num_tiles() == 10);
  CHECK((a->row1 - a->row0) == 71);
  CHECK((a->col1 - a->col0) == 81);
  CHECK_FALSE(a->shrink);
  // 1080x1920: 3x5 tiles, 81x135 grid unpadded to 75x135 -> ratio 1.242 -> shrunk to 60x108.
  auto b = ComputeAnyresLayout(ov, 1080, 1920);
  REQUIRE(b.ok());
  CHECK(b->shrink);
  CHECK((b->row1 - b->row0) == 75);
  CHECK(b->out_h == 60);
  CHECK(b->out_w == 108);
  CHECK(ComputeAnyresLayout(ov, 0, 10).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Python rounding helpers behave like CPython", "[unit][engine][vision]") {
  CHECK(PyIntRound7(70.99999999) == 71);  // round(., 7) first, then truncate
  CHECK(PyIntRound7(70.9999999) == 70);
  CHECK(PyIntRound7(3.0) == 3);
  CHECK(PyFloorDiv(68.0, 1.2421) == 54.0);
  CHECK(PyFloorDiv(7.0, 3.5) == 2.0);
  CHECK(PyFloorDiv(-7.0, 2.0) == -4.0);
  CHECK(PyFloorDiv(0.3, 0.1) == 2.0);  // CPython: 0.3 // 0.1 == 2.0 (fmod-based)
}

TEST_CASE("Binding names the missing or misshapen tensor", "[unit][engine][vision]") {
  const LlavaConfig config = TinySiglip();
  auto ckpt = RandomVisionCheckpoint(config, DType::kF32, 5);
  REQUIRE(ckpt.ok());
  {
    auto broken = *ckpt;
    broken.erase("model.vision_tower.vision_model.encoder.layers.2.mlp.fc2.bias");
    auto w = BindLlavaVisionWeights(config, MapLookup(broken));
    REQUIRE(w.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(MessageOf(w.status()), Catch::Contains("encoder.layers.2.mlp.fc2.bias"));
  }
  {
    auto broken = *ckpt;
    auto wrong = Tensor::Zeros({24, 31}, DType::kF32);
    REQUIRE(wrong.ok());
    broken["model.multi_modal_projector.linear_1.weight"] = *wrong;
    auto w = BindLlavaVisionWeights(config, MapLookup(broken));
    REQUIRE(w.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(w.status()), Catch::Contains("linear_1.weight"));
    CHECK_THAT(MessageOf(w.status()), Catch::Contains("[24, 32]"));
  }
  {
    LlavaConfig bad = config;
    bad.vision_feature_layers = {-5};  // hidden_states has 4 entries
    auto w = BindLlavaVisionWeights(bad, MapLookup(*ckpt));
    REQUIRE(w.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(w.status()), Catch::Contains("vision_feature_layer"));
  }
  {
    // Feature layer -2 binds one layer fewer: the last block is never needed.
    LlavaConfig shallow = config;
    shallow.vision_feature_layers = {-2};
    auto w = BindLlavaVisionWeights(shallow, MapLookup(*ckpt));
    REQUIRE(w.ok());
    CHECK(w->tower.layers.size() == 2);
  }
}

TEST_CASE("Random checkpoints are deterministic per seed", "[unit][engine][vision]") {
  const LlavaConfig config = TinySiglip();
  auto a = RandomVisionCheckpoint(config, DType::kBF16, 11);
  auto b = RandomVisionCheckpoint(config, DType::kBF16, 11);
  auto c = RandomVisionCheckpoint(config, DType::kBF16, 12);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  REQUIRE(a->size() == b->size());
  const std::string name = "model.vision_tower.vision_model.encoder.layers.1.mlp.fc1.weight";
  CHECK(testing::ToFloatVector(a->at(name)) == testing::ToFloatVector(b->at(name)));
  CHECK(testing::ToFloatVector(a->at(name)) != testing::ToFloatVector(c->at(name)));
  // Roughly the requested spread: stddev 0.02.
  const auto v = testing::ToFloatVector(a->at(name));
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  CHECK(std::sqrt(ss / static_cast<double>(v.size())) == Approx(0.02).epsilon(0.1));
}

TEST_CASE("TimeVisionTower runs a tower of the given shape", "[unit][engine][vision]") {
  VisionTimingOptions options;
  options.frames = 2;
  options.iterations = 2;
  options.warmup = true;
  auto r = TimeVisionTower(TinySiglip().vision, options);
  REQUIRE(r.ok());
  CHECK(r->ms_per_frame > 0);
  CHECK(r->min_ms_per_frame <= r->ms_per_frame);
  CHECK(r->frames == 2);
  // 25 positions, D 32, I 48, 3 layers, 3·6·6 inputs per patch.
  const double T = 25, D = 32, I = 48, K = 108;
  CHECK(r->gflops_per_frame ==
        Approx((2 * T * K * D + 3 * (2 * T * (4 * D * D + 2 * D * I) + 4 * T * T * D)) / 1e9));
  // The so400m shape the bench engineer times.
  const model::VisionConfig so400m = SiglipSo400mConfig();
  CHECK(so400m.num_patches() == 729);
  CHECK(so400m.num_hidden_layers == 26);
  options.frames = 0;
  CHECK(TimeVisionTower(so400m, options).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("With int8 projections the tower matches f64 with int8 Linear inputs",
          "[unit][engine][vision]") {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  const bool amx_allowed = GENERATE(true, false);
  std::optional<ops::cpu::ScopedF32Gemm> no_amx;  // the VNNI / AVX2 many-row path instead
  if (!amx_allowed) no_amx.emplace();
  CAPTURE(amx_allowed);
  LlavaConfig config = TinySiglip();
  config.vision_feature_layers = {-1};
  auto ckpt = RandomVisionCheckpoint(config, DType::kBF16, seed + 11, 0.15f);
  REQUIRE(ckpt.ok());
  auto weights = BindLlavaVisionWeights(config, MapLookup(*ckpt));
  REQUIRE(weights.ok());
  REQUIRE(runtime::QuantizeVisionProjections(weights->tower).ok());
  const EncoderLayerWeights& first = weights->tower.layers[0];
  REQUIRE(first.fc2_weight.dtype() == DType::kI8);
  REQUIRE(first.fc2_scale.shape() == Shape{first.fc2_weight.dim(0)});
  REQUIRE(weights->tower.patch_weight.dtype() == DType::kBF16);  // the patch GEMM stays 16-bit

  // The reference reads each projection as the int8 kernels do, q · scale, and quantises its
  // inputs per row the same way.
  testing::WeightMap dequantised = *ckpt;
  for (size_t l = 0; l < weights->tower.layers.size(); ++l) {
    const EncoderLayerWeights& w = weights->tower.layers[l];
    const std::string at = fmt::format("{}encoder.layers.{}.", kVisionTowerPrefix, l);
    for (const auto& [name, q, scale] : {std::tuple{"self_attn.q_proj", &w.q_weight, &w.q_scale},
                                         {"self_attn.k_proj", &w.k_weight, &w.k_scale},
                                         {"self_attn.v_proj", &w.v_weight, &w.v_scale},
                                         {"self_attn.out_proj", &w.out_weight, &w.out_scale},
                                         {"mlp.fc1", &w.fc1_weight, &w.fc1_scale},
                                         {"mlp.fc2", &w.fc2_weight, &w.fc2_scale}}) {
      Tensor values = *Tensor::Empty(q->shape(), DType::kF32);
      const int64_t n = q->dim(0), k = q->dim(1);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t c = 0; c < k; ++c) {
          values.data<float>()[j * k + c] =
              static_cast<float>(q->data<int8_t>()[j * k + c]) * scale->data<float>()[j];
        }
      }
      dequantised[at + name + ".weight"] = values;
    }
  }
  // As an engine does at load: from here on the int8 projections are held packed only (their
  // row-major codes, read above, are let go), and the tower runs on those.
  REQUIRE(PrepareVisionWeights(*weights).ok());
  const Tensor pixels = RandomPixels(3, config, rng);  // 75 rows: the many-row int8 kernels
  const std::vector<int64_t> layers = {1, 3};
  auto hs = VisionTowerHiddenStates(config.vision, weights->tower, pixels, layers, {});
  REQUIRE(hs.ok());
  const auto want = testing::ReferenceHiddenStates(config.vision, dequantised, Values(pixels), 3,
                                                   testing::EncoderInputs::kInt8PerRow);
  // As for the decoder's int8 projections: where an f32 input lies within f32 error of a midpoint
  // between codes, the reference's f64 input rounds to the neighbouring code, a whole step (1/127
  // of the row's largest value) apart, and later layers carry it on. Without a flip the two agree
  // to ~1e-6; a wrong scale, code, row or tile is off by O(1).
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::vector<float> got = Values((*hs)[i]);
    const std::vector<double>& ref = want[static_cast<size_t>(layers[i])];
    REQUIRE(got.size() == ref.size());
    double err = 0, norm = 0;
    for (size_t e = 0; e < ref.size(); ++e) {
      err += (got[e] - ref[e]) * (got[e] - ref[e]);
      norm += ref[e] * ref[e];
    }
    const double relative_rms = std::sqrt(err / norm);
    CAPTURE(layers[i], relative_rms);
    CHECK(relative_rms <= 5e-2);
  }

  // int8 weights stay on the CPU: a GPU copy is refused before anything moves.
  const auto on_gpu = VisionTowerWeightsOn(weights->tower, Device::Cuda(0));
  CHECK(on_gpu.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(on_gpu.status()), Catch::Contains("int8"));
}

TEST_CASE("Vision inputs with the wrong shape are rejected", "[unit][engine][vision]") {
  const LlavaConfig config = TinySiglip();
  auto weights = RandomLlavaVisionWeights(config, DType::kF32, 3);
  REQUIRE(weights.ok());
  auto small = Tensor::Zeros({1, 3, 30, 30}, DType::kF32);
  REQUIRE(small.ok());
  auto r = EncodeVideo(config, *weights, *small);
  REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(MessageOf(r.status()), Catch::Contains("pixel_values"));
  // "default" selection leaves G·G - 1 tokens, which the reference cannot view as a grid.
  LlavaConfig dropped = config;
  dropped.vision_feature_select_strategy = FeatureSelect::kDefault;
  auto frames = Tensor::Zeros({1, 3, 32, 32}, DType::kF32);
  REQUIRE(frames.ok());
  CHECK(EncodeVideo(dropped, *weights, *frames).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine::vision
