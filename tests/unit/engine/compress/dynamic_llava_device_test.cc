// Dynamic-LLaVA on every device present (tests/unit/engine/ops/device_cases.h): the two predictors
// (LayerNorm, GELU, the ViT blocks' bidirectional attention, the masked mean and broadcast, the
// MLP heads) and the decoder's row removal (dynamic_llava prefill).
//
// The predictors' independent reference is PyTorch's: the shipped predictors on real hidden states
// (the golden of "Dynamic-LLaVA predictors equal PyTorch's on real hidden states",
// dynamic_llava_test.cc), on every device. Random predictors of the shipped shape (hidden 128,
// width 128, 4 heads, 2 blocks) at other row counts have no reference but the CPU's result: there
// a GPU is compared with the CPU, whose predictors the golden checks. Likewise the row removal on
// a model of the shipped text shape with random weights: every device keeps every text row and
// floor(101 · 0.2) visual rows from sparse_layer on, and a GPU keeps the CPU's rows with the CPU's
// logits; the CPU's pruned prefill is checked against transformers with the same pruning in
// "dynamic_llava's pruned prefill matches transformers with the pruning of tools/train".
//
// Tolerances, f32 everywhere (no TF32): the CPU against PyTorch 1e-4 abs (the golden test's); a
// GPU against PyTorch that plus 1e-4 of the logits' RMS, its bound against the CPU (only
// summation orders differ), and against the CPU 1e-4 of the logits' RMS per element for the
// predictors and the decoder's f32 bound (llm/decoder_device_test.cc, 1e-3) for the pruned
// prefill. The kept rows must be identical: a top-k decision could flip only if the k-th and
// (k+1)-th of 101 random scores (spread ~1) were within ~1e-5 of each other, about one run in a
// thousand.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <optional>
#include <random>

#include "engine/compress/dynamic_llava_predictors.h"
#include "engine/compress/random_predictors.h"
#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/predictor_loading.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "tests/testing/random.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/tiny_decoder.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

constexpr int64_t kHidden = 128, kWidth = 128, kHeads = 4;

Tensor RandomRows(Shape shape, float stddev, std::mt19937_64& rng) {
  Tensor t = *Tensor::Empty(shape, DType::kF32);
  const auto v = testing::RandomNormal(static_cast<size_t>(t.numel()), rng);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = stddev * v[i];
  return t;
}

// Random predictors of the shipped shape; the same values on every device for one seed.
std::shared_ptr<const compress::DynamicLlavaPredictors> RandomPredictors(uint64_t seed,
                                                                         const Device& device) {
  auto p = compress::MakeRandomPredictors(
      {.hidden = kHidden, .width = kWidth, .heads = kHeads, .seed = seed, .device = device});
  FZ_CHECK(p.ok());
  return *p;
}

Tensor OnHost(const StatusOr<Tensor>& t) {
  INFO((t.ok() ? "" : MessageOf(t.status())));
  REQUIRE(t.ok());
  auto host = t->To(Device::Cpu());
  REQUIRE(host.ok());
  return *std::move(host);
}

std::vector<double> Values(const Tensor& t) {
  const std::vector<float> f = testing::ToFloatVector(t);
  return std::vector<double>(f.begin(), f.end());
}

// The bound of a device against PyTorch's logits `want` (the file comment says why).
testing::Tolerance GoldenTolerance(const Device& device, const Tensor& want) {
  if (device.is_cpu()) return {1e-4, 0.0};
  return {1e-4 + 1e-4 * Rms(testing::ToFloatVector(want)), 0.0};
}

TEST_CASE("Dynamic-LLaVA predictors on every device equal PyTorch's and the CPU's",
          "[unit][engine][compress][devices]") {
  const auto golden = model::SafetensorsFile::Open(
      testing::SourceDir() / "tests/data/golden/framezip-tiny-video/predictors_golden.safetensors");
  REQUIRE(golden.ok());
  const Tensor image_hidden = *golden->Get("image.hidden");
  const Tensor image_want = *golden->Get("image.logits");
  const Tensor text_hidden = *golden->Get("text.hidden");
  const Tensor text_want = *golden->Get("text.logits");
  std::mt19937_64 rng(testing::TestSeed());
  const uint64_t seed = rng();
  const std::shared_ptr<const compress::DynamicLlavaPredictors> cpu_random =
      RandomPredictors(seed, Device::Cpu());

  ForEachDevice([&](const Device& device) {
    auto shipped = runtime::LoadDynamicLlavaPredictors(
        testing::SourceDir() / "models/framezip-tiny-video", kHidden, device);
    INFO((shipped.ok() ? "" : MessageOf(shipped.status())));
    REQUIRE(shipped.ok());
    {
      INFO("image predictor, the golden's 25 video rows");
      const Tensor got = OnHost((*shipped)->ImageLogits(On(image_hidden, device)));
      CheckCloseTo(got, Values(image_want), GoldenTolerance(device, image_want));
    }
    {
      INFO("text predictor, the golden's 40 prompt rows");
      const Tensor got = OnHost((*shipped)->TextLogits(On(text_hidden, device)));
      CheckCloseTo(got, Values(text_want), GoldenTolerance(device, text_want));
    }
    if (device.is_cpu()) return;  // the CPU is the reference of the rest
    const auto random = RandomPredictors(seed, device);
    std::mt19937_64 rows_rng(seed + 1);
    for (const int64_t n : {1, 25, 257, 1025}) {
      CAPTURE(n);
      const Tensor hidden = RandomRows({n, kHidden}, 1.f, rows_rng);
      const Tensor want_image = *cpu_random->ImageLogits(hidden);
      const Tensor want_text = *cpu_random->TextLogits(hidden);
      const Tensor got_image = OnHost(random->ImageLogits(On(hidden, device)));
      const Tensor got_text = OnHost(random->TextLogits(On(hidden, device)));
      CheckCloseTo(got_image, Values(want_image),
                   {1e-4 * Rms(testing::ToFloatVector(want_image)), 0.0});
      CheckCloseTo(got_text, Values(want_text),
                   {1e-4 * Rms(testing::ToFloatVector(want_text)), 0.0});
    }
  });
}

// What one device's pruned prefill left: the logits and each layer's positions.
struct Pruned {
  Tensor logits;
  std::vector<std::vector<int32_t>> positions;
};

TEST_CASE("dynamic_llava prefill on every device removes the rows the CPU removes",
          "[unit][engine][compress][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const llm::DecoderShape s = testing::ShippedTextShape();
  REQUIRE(s.hidden == kHidden);
  const auto random = *llm::MakeRandomDecoderWeights(
      s, {.dtype = DType::kF32, .seed = rng(), .stddev = 0.09f, .tied_lm_head = true});
  const uint64_t seed = rng();

  // 6 text rows, 101 visual rows (25 frames + newline), 9 text rows.
  const int64_t t = 116;
  std::vector<uint8_t> visual(static_cast<size_t>(t), 0);
  std::fill(visual.begin() + 6, visual.begin() + 107, uint8_t{1});
  const Tensor embeds = RandomRows({t, kHidden}, 1.f, rng);

  std::optional<Pruned> cpu;  // the CPU runs first (DevicesPresent)
  ForEachDevice([&](const Device& device) {
    auto dec = llm::Decoder::Create(s, random.weights, device);
    REQUIRE(dec.ok());
    compress::PolicyResources resources;
    resources.dynamic_llava = RandomPredictors(seed, device);
    (*dec)->set_policy_resources(resources);
    const kv::KvFormat formats[] = {kv::KvFormat::kF32};
    auto pools = kv::KvPools::Create((*dec)->KvLayout(kv::KvFormat::kF32), formats,
                                     int64_t{64} << 20, device);
    REQUIRE(pools.ok());
    auto seq = (*dec)->NewSequence(**pools, kv::KvFormat::kF32, "dynamic_llava");
    REQUIRE(seq.ok());
    Pruned got;
    got.logits = OnHost((*dec)->Prefill(**seq, On(embeds, device), {.visual = visual}));
    for (int l = 0; l < s.layers; ++l) got.positions.push_back((*seq)->kv.positions(l));
    // Layers before sparse_layer (2) keep every row; from it on every text row and
    // floor(101 · 0.2) visual rows, in order.
    for (int l = 0; l < s.layers; ++l) {
      CAPTURE(l);
      const std::vector<int32_t>& p = got.positions[static_cast<size_t>(l)];
      CHECK(std::is_sorted(p.begin(), p.end()));
      int64_t text = 0, seen_visual = 0;
      for (const int32_t pos : p) (visual[static_cast<size_t>(pos)] ? seen_visual : text) += 1;
      CHECK(text == t - 101);
      CHECK(seen_visual == (l < 2 ? 101 : 20));
    }
    if (device.is_cpu()) {
      cpu = got;
      return;
    }
    REQUIRE(cpu.has_value());
    CHECK(got.positions == cpu->positions);
    CheckCloseTo(got.logits, Values(cpu->logits),
                 {1e-3 * Rms(testing::ToFloatVector(cpu->logits)), 0.0});
  });
}

}  // namespace
}  // namespace framezip::engine::test
