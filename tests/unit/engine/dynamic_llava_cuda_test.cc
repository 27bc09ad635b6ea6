// [cuda]: Dynamic-LLaVA on the GPU against the CPU — the two predictors (LayerNorm, GELU, the
// ViT blocks' bidirectional attention, the masked mean and broadcast, the MLP heads) with fresh
// random weights of the shipped predictors' shape (hidden 128, width 128, 4 heads, 2 blocks), and
// the decoder's row removal (dynamic_llava prefill) on a model of the shipped text shape: the same
// rows stay (positions per layer) and the logits agree.
//
// Tolerances: f32 everywhere, only summation orders differ (no TF32): 1e-4 of the logits' RMS per
// element for the predictors; the decoder's f32 bound of llm/decoder_device_test.cc (1e-3). The
// kept rows must be identical: a top-k decision could flip only if the k-th and (k+1)-th of 101
// random scores (spread ~1) were within ~1e-5 of each other, about one run in a thousand.
#include <catch2/catch.hpp>
#include <random>

#include "engine/compress/random_predictors.h"
#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/cuda_test_util.h"

namespace framezip::engine::test {
namespace {

constexpr int64_t kHidden = 128, kWidth = 128, kHeads = 4;

Tensor RandomTensor(Shape shape, float stddev, std::mt19937_64& rng) {
  Tensor t = *Tensor::Empty(shape, DType::kF32);
  const auto v = testing::RandomNormal(static_cast<size_t>(t.numel()), rng);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = stddev * v[i];
  return t;
}

// Random predictors of the shipped shape; the same values on every device for one seed.
std::shared_ptr<const compress::DynamicLlavaPredictors> RandomPredictors(uint64_t seed,
                                                                         Device device) {
  auto p = compress::MakeRandomPredictors(
      {.hidden = kHidden, .width = kWidth, .heads = kHeads, .seed = seed, .device = device});
  FZ_CHECK(p.ok());
  return *p;
}

TEST_CASE("Dynamic-LLaVA predictors on the GPU equal the CPU's", "[cuda][compress]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const uint64_t seed = rng();
  const auto cpu = RandomPredictors(seed, Device::Cpu());
  const auto gpu = RandomPredictors(seed, Device::Cuda(0));
  for (const int64_t n : {1, 25, 257, 1025}) {
    CAPTURE(n);
    const Tensor hidden = RandomTensor({n, kHidden}, 1.f, rng);
    const Tensor want_image = *cpu->ImageLogits(hidden);
    const Tensor want_text = *cpu->TextLogits(hidden);
    auto got_image = gpu->ImageLogits(OnGpu(hidden));
    auto got_text = gpu->TextLogits(OnGpu(hidden));
    FZ_REQUIRE_OK(got_image);
    FZ_REQUIRE_OK(got_text);
    const double tol_image = 1e-4 * Rms(testing::ToFloatVector(want_image));
    const double tol_text = 1e-4 * Rms(testing::ToFloatVector(want_text));
    CheckClose(*got_image, want_image, {.abs = tol_image, .rel = 0});
    CheckClose(*got_text, want_text, {.abs = tol_text, .rel = 0});
  }
}

TEST_CASE("dynamic_llava prefill removes the same rows on the GPU as on the CPU",
          "[cuda][compress][llm]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  llm::DecoderShape s;
  s.hidden = kHidden;
  s.layers = 4;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 32;
  s.intermediate = 384;
  s.vocab = 448;
  s.rms_eps = 1e-6f;
  s.qkv_bias = true;
  s.rope.head_dim = 32;
  s.rope.theta = 1e4;
  const auto random = *llm::MakeRandomDecoderWeights(
      s, {.dtype = DType::kF32, .seed = rng(), .stddev = 0.09f, .tied_lm_head = true});
  const uint64_t seed = rng();

  // 6 text rows, 101 visual rows (25 frames + newline), 9 text rows.
  const int64_t t = 116;
  std::vector<uint8_t> visual(static_cast<size_t>(t), 0);
  std::fill(visual.begin() + 6, visual.begin() + 107, uint8_t{1});
  const Tensor embeds = RandomTensor({t, kHidden}, 1.f, rng);

  std::vector<Tensor> logits;
  std::vector<std::vector<std::vector<int32_t>>> positions;
  for (const Device device : {Device::Cpu(), Device::Cuda(0)}) {
    auto dec = llm::Decoder::Create(s, random.weights, device);
    FZ_REQUIRE_OK(dec);
    compress::PolicyResources resources;
    resources.dynamic_llava = RandomPredictors(seed, device);
    (*dec)->set_policy_resources(resources);
    const kv::KvFormat formats[] = {kv::KvFormat::kF32};
    auto pools = kv::KvPools::Create((*dec)->KvLayout(kv::KvFormat::kF32), formats,
                                     int64_t{64} << 20, device);
    FZ_REQUIRE_OK(pools);
    auto seq = (*dec)->NewSequence(**pools, kv::KvFormat::kF32, "dynamic_llava");
    FZ_REQUIRE_OK(seq);
    auto out = (*dec)->Prefill(**seq, device.is_cpu() ? embeds : OnGpu(embeds), {.visual = visual});
    FZ_REQUIRE_OK(out);
    logits.push_back(*out->To(Device::Cpu()));
    positions.emplace_back();
    for (int l = 0; l < s.layers; ++l) positions.back().push_back((*seq)->kv.positions(l));
  }
  CHECK(positions[1] == positions[0]);
  CHECK(positions[0][2].size() == static_cast<size_t>(t - 101 + 20));  // floor(101 · 0.2)
  CheckClose(logits[1], logits[0],
             {.abs = 1e-3 * Rms(testing::ToFloatVector(logits[0])), .rel = 0});
}

}  // namespace
}  // namespace framezip::engine::test
