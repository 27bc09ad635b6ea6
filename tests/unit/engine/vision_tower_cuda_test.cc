// [cuda]: the whole vision tower on the GPU (weights copied there by VisionTowerWeightsOn) against
// the same function on the CPU — which the vision golden tests check against transformers — for a
// SigLIP-shaped tower (patch bias, gelu_pytorch_tanh) and a CLIP-shaped one (class token,
// pre_layrnorm, quick_gelu), with f32 or bf16 weights, several images per batch and a partial last
// batch. Every hidden state asked for comes back to the host.
//
// Tolerances relative to the CPU result's RMS, those of the whole-decoder test
// (decoder_cuda_test.cc), whose ops these are too (a wrong row, head or mask gives errors of
// the order of the RMS itself): f32 weights differ only in summation order and in the last bit
// of exp/tanh (attention, GEMMs, norms, GELU): 1e-3 per element, 3e-4 in relative L2. bf16
// weights: every GEMM on the GPU rounds its f32 input to bf16 (linear_cuda_test.cc: ~1e-3 of the
// output's RMS per GEMM), compounded over the patch GEMM and 2 layers of 6 GEMMs, and attention
// runs on bf16 tensor cores (head_dim 16 zero-padded to 64; attention_cuda_test.cc): 1e-1 per
// element, 3e-2 in relative L2.
#include <catch2/catch.hpp>
#include <random>

#include "engine/vision/vision_tower.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

struct TinyTower {
  model::VisionConfig config;
  vision::VisionTowerWeights weights;
};

TinyTower MakeTinyTower(model::VisionArch arch, DType dtype, std::mt19937_64& rng) {
  TinyTower m;
  model::VisionConfig& c = m.config;
  c.arch = arch;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.head_dim = 16;
  // 9 × 14 + 2 trailing pixels the conv ignores: 81 patches, enough rows (>= 64) that bf16
  // weights take the tensor-core attention path.
  c.image_size = 128;
  c.patch_size = 14;
  c.hidden_act = arch == model::VisionArch::kClip ? model::Activation::kQuickGelu
                                                  : model::Activation::kGeluTanh;
  const int64_t D = c.hidden_size, I = c.intermediate_size, K = 3 * 14 * 14;
  auto gain = [&] {  // LayerNorm weights near 1
    RandomTensor t = MakeRandom({D}, DType::kF32, rng, 0.1f);
    for (int64_t i = 0; i < D; ++i) t.tensor.data<float>()[i] += 1.f;
    return t.tensor;
  };
  auto small = [&](Shape shape, float stddev) {
    return MakeRandom(shape, dtype, rng, stddev).tensor;
  };
  vision::VisionTowerWeights& w = m.weights;
  w.patch_weight = small({D, K}, 0.05f);
  if (c.patch_embedding_bias()) w.patch_bias = small({D}, 0.1f);
  if (c.has_class_embedding()) w.class_embedding = small({D}, 0.5f);
  w.position_embedding = small({c.num_positions(), D}, 0.5f);
  if (c.has_pre_layernorm()) {
    w.pre_ln_weight = gain();
    w.pre_ln_bias = small({D}, 0.1f);
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    vision::EncoderLayerWeights& e = w.layers.emplace_back();
    e.ln1_weight = gain();
    e.ln1_bias = small({D}, 0.1f);
    e.ln2_weight = gain();
    e.ln2_bias = small({D}, 0.1f);
    e.q_weight = small({D, D}, 0.12f);
    e.q_bias = small({D}, 0.1f);
    e.k_weight = small({D, D}, 0.12f);
    e.k_bias = small({D}, 0.1f);
    e.v_weight = small({D, D}, 0.12f);
    e.v_bias = small({D}, 0.1f);
    e.out_weight = small({D, D}, 0.12f);
    e.out_bias = small({D}, 0.1f);
    e.fc1_weight = small({I, D}, 0.12f);
    e.fc1_bias = small({I}, 0.1f);
    e.fc2_weight = small({D, I}, 0.08f);
    e.fc2_bias = small({D}, 0.1f);
  }
  return m;
}

TEST_CASE("The whole vision tower on the GPU matches the CPU (SigLIP and CLIP shapes)",
          "[cuda][vision]") {
  if (SkipWithoutGpu()) return;
  const auto arch = GENERATE(model::VisionArch::kSiglip, model::VisionArch::kClip);
  const DType dtype = GENERATE(DType::kF32, DType::kBF16);
  CAPTURE(arch == model::VisionArch::kClip ? "clip" : "siglip", DTypeName(dtype));
  const RmsTolerance tol =
      dtype == DType::kF32 ? RmsTolerance{1e-3, 3e-4} : RmsTolerance{1e-1, 3e-2};
  std::mt19937_64 rng(testing::TestSeed());
  const TinyTower m = MakeTinyTower(arch, dtype, rng);
  auto on_gpu = vision::VisionTowerWeightsOn(m.weights, Device::Cuda(0));
  INFO((on_gpu.ok() ? "" : MessageOf(on_gpu.status())));
  REQUIRE(on_gpu.ok());

  // 5 images in batches of 2: two full batches and a partial one.
  const auto pixels =
      MakeRandom({5, 3, m.config.image_size, m.config.image_size}, DType::kF32, rng);
  const std::vector<int64_t> layers = {0, 2, 1};  // embeddings, last, middle; out of order
  const vision::VisionRunOptions options{.max_images_per_batch = 2};
  auto want = vision::VisionTowerHiddenStates(m.config, m.weights, pixels.tensor, layers, options);
  auto got = vision::VisionTowerHiddenStates(m.config, *on_gpu, pixels.tensor, layers, options);
  INFO((got.ok() ? "" : MessageOf(got.status())));
  REQUIRE(want.ok());
  REQUIRE(got.ok());
  REQUIRE(got->size() == layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    INFO("hidden_states[" << layers[i] << "]");
    REQUIRE((*got)[i].device().is_cpu());
    REQUIRE((*got)[i].shape() == (*want)[i].shape());
    CheckWithinRms((*got)[i], (*want)[i], tol);
  }
}

}  // namespace
}  // namespace framezip::engine::test
