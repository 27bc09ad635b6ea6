#include "engine/synthetic/vision_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

#include "engine/runtime/weight_format.h"
#include "engine/synthetic/random_vision_weights.h"
#include "engine/vision/vision_tower.h"

namespace framezip::engine::vision {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

model::VisionConfig SiglipSo400mConfig(int64_t num_layers) {
  model::VisionConfig v;
  v.arch = model::VisionArch::kSiglip;
  v.model_type = "siglip_vision_model";
  v.hidden_size = 1152;
  v.intermediate_size = 4304;
  v.num_hidden_layers = num_layers;
  v.num_attention_heads = 16;
  v.head_dim = 1152 / 16;
  v.num_channels = 3;
  v.image_size = 384;
  v.patch_size = 14;
  v.layer_norm_eps = 1e-6;
  v.hidden_act = model::Activation::kGeluTanh;
  return v;
}

model::LlavaConfig OnevisionConfigFor(const model::VisionConfig& vision, int64_t text_hidden) {
  model::LlavaConfig c;
  c.arch = model::LlavaArch::kLlavaOnevision;
  c.model_type = "llava_onevision";
  c.vision = vision;
  c.text.hidden_size = text_hidden;
  c.vision_feature_layers = {-1};
  c.vision_feature_select_strategy = model::FeatureSelect::kFull;
  c.projector_hidden_act = model::Activation::kGeluErf;
  c.projector_bias = true;
  c.has_image_newline = true;
  return c;
}

StatusOr<VisionTiming> TimeVisionTower(const model::VisionConfig& vision,
                                       const VisionTimingOptions& options) {
  if (options.frames < 1 || options.iterations < 1) {
    return InvalidArgumentError("vision bench: frames ({}) and iterations ({}) must be >= 1",
                                options.frames, options.iterations);
  }
  VisionTiming r;
  r.frames = options.frames;
  r.iterations = options.iterations;
  const auto t0 = std::chrono::steady_clock::now();
  // Only the tower is timed; the projector width is irrelevant, keep it small.
  const model::LlavaConfig config = OnevisionConfigFor(vision, 64);
  FZ_ASSIGN_OR_RETURN(LlavaVisionWeights weights,
                      RandomLlavaVisionWeights(config, options.weight_dtype, options.seed));
  if (options.int8_projections) {
    FZ_RETURN_IF_ERROR(runtime::QuantizeVisionProjections(weights.tower));
  }
  FZ_RETURN_IF_ERROR(PrepareVisionWeights(weights));  // the GEMM layouts, as an engine at load
  FZ_ASSIGN_OR_RETURN(Tensor pixels, Tensor::Empty({options.frames, vision.num_channels,
                                                    vision.image_size, vision.image_size},
                                                   DType::kF32));
  std::mt19937 rng(static_cast<uint32_t>(options.seed));
  std::uniform_real_distribution<float> pixel(-1.0f, 1.0f);  // normalised pixel range
  for (int64_t i = 0; i < pixels.numel(); ++i) pixels.data<float>()[i] = pixel(rng);
  r.setup_ms = MsSince(t0);

  VisionRunOptions run;
  run.max_images_per_batch = options.frames;
  const std::vector<int64_t> last = {vision.num_hidden_layers};
  if (options.warmup) {
    FZ_ASSIGN_OR_RETURN(auto unused,
                        VisionTowerHiddenStates(vision, weights.tower, pixels, last, run));
    (void)unused;
  }
  double total = 0, best = 1e300;
  for (int i = 0; i < options.iterations; ++i) {
    const auto t = std::chrono::steady_clock::now();
    FZ_ASSIGN_OR_RETURN(auto hs, VisionTowerHiddenStates(vision, weights.tower, pixels, last, run));
    (void)hs;
    const double ms = MsSince(t);
    total += ms;
    best = std::min(best, ms);
  }
  r.ms_per_frame = total / options.iterations / static_cast<double>(options.frames);
  r.min_ms_per_frame = best / static_cast<double>(options.frames);
  // FLOPs per frame: patch GEMM + per layer (4 D² projections + 2 D·I MLP) · T + attention 2·T²·D.
  const double T = static_cast<double>(vision.num_positions()), D = vision.hidden_size;
  const double I = vision.intermediate_size;
  const double K = static_cast<double>(vision.num_channels * vision.patch_size * vision.patch_size);
  const double per_layer = 2 * T * (4 * D * D + 2 * D * I) + 2 * 2 * T * T * D;
  r.gflops_per_frame = (2 * T * K * D + vision.num_hidden_layers * per_layer) / 1e9;
  return r;
}

}  // namespace framezip::engine::vision
