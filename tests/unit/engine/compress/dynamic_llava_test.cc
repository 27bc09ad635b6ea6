// Dynamic-LLaVA (engine/compress/dynamic_llava.h) on the shipped model and its trained
// predictors: the C++ predictors against PyTorch's modules (a golden of tools/train's code on real
// hidden states), the policy's refusals, vision_keep = 1 with gating off reproducing `none`
// exactly, physical pruning from sparse_layer on (per-layer KV lengths, original positions,
// stats), forced text gating halving KV growth in layers >= sparse_layer, snapshot and restore,
// and batched / mixed steps equal to separate ones.
#include "engine/compress/dynamic_llava.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/kv/page_codec.h"
#include "engine/model/config.h"
#include "engine/model/safetensors.h"
#include "engine/ops/gemm_amx.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/predictor_loading.h"
#include "tests/testing/compare.h"
#include "tests/testing/shipped_model.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/tiny_decoder.h"

namespace framezip::engine {
namespace {

std::filesystem::path ModelDir() { return testing::SourceDir() / "models/framezip-tiny-video"; }

// The conversation's KV as decoded pages per layer (one export of everything).
std::vector<kv::DecodedLayer> KvLayers(const runtime::Engine& eng, const runtime::Conversation& c) {
  auto seg = eng.ExportConversation(c, kv::SegmentMark{}, 1 << 20);
  REQUIRE(seg.ok());
  auto decoded = kv::DecodeSegment(seg->encoded.blocks);
  REQUIRE(decoded.ok());
  return decoded->layers;
}

std::vector<int32_t> LayerPositions(const kv::DecodedLayer& layer) {
  std::vector<int32_t> p;
  for (const auto& page : layer.pages) {
    p.insert(p.end(), page.page.positions.begin(), page.page.positions.end());
  }
  return p;
}

TEST_CASE("Dynamic-LLaVA predictors equal PyTorch's on real hidden states",
          "[unit][engine][compress][golden]") {
  auto preds = runtime::LoadDynamicLlavaPredictors(ModelDir(), 128);
  INFO((preds.ok() ? "" : MessageOf(preds.status())));
  REQUIRE(preds.ok());
  CHECK((*preds)->config().sparse_layer == 2);
  CHECK((*preds)->config().vision_keep_rate == Approx(0.2));
  auto golden = model::SafetensorsFile::Open(testing::SourceDir() /
                                             "tests/data/golden/framezip-tiny-video/"
                                             "predictors_golden.safetensors");
  REQUIRE(golden.ok());

  // Image predictor over the 25 video rows of hidden_states[2] (synthvid test item 42).
  const Tensor image_hidden = *golden->Get("image.hidden");
  const Tensor image_want = *golden->Get("image.logits");
  auto image = (*preds)->ImageLogits(image_hidden);
  REQUIRE(image.ok());
  REQUIRE(image->shape() == image_want.shape());
  CHECK(testing::MaxAbsDiff(*image, image_want) < 1e-4);
  // The same top-k (k = floor(25 · 0.2) = 5) as torch: the keep decision itself.
  const int64_t n = image_want.dim(0), k = n / 5;
  auto top = [&](const Tensor& l) {
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    const float* p = l.data<float>();
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
      return p[2 * a] - p[2 * a + 1] > p[2 * b] - p[2 * b + 1];
    });
    idx.resize(static_cast<size_t>(k));
    std::sort(idx.begin(), idx.end());
    return idx;
  };
  CHECK(top(*image) == top(image_want));

  // Text predictor, per row, on all 40 prompt rows.
  const Tensor text_hidden = *golden->Get("text.hidden");
  const Tensor text_want = *golden->Get("text.logits");
  auto text = (*preds)->TextLogits(text_hidden);
  REQUIRE(text.ok());
  CHECK(testing::MaxAbsDiff(*text, text_want) < 1e-4);
  for (int64_t r = 0; r < text_want.dim(0); ++r) {
    const float* g = text_want.data<float>() + 2 * r;
    const float* c = text->data<float>() + 2 * r;
    CHECK((g[0] > g[1]) == (c[0] > c[1]));
  }

  // Wrong inputs are refused, naming what is wrong.
  const Tensor narrow = *Tensor::Zeros({3, 64}, DType::kF32);
  auto bad = (*preds)->ImageLogits(narrow);
  REQUIRE_FALSE(bad.ok());
  CHECK(absl::IsInvalidArgument(bad.status()));
}

// The image predictor's cost at 64 frames (257 visual rows), alone: the part of a pruned prefill
// that dense prefill does not pay. Prints a median; run by hand (`[.][bench]`), profile with perf.
TEST_CASE("Dynamic-LLaVA image predictor timing", "[.][bench]") {
  auto preds = runtime::LoadDynamicLlavaPredictors(ModelDir(), 128);
  REQUIRE(preds.ok());
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  Tensor hidden = *Tensor::Empty({257, 128}, DType::kF32);
  for (int64_t i = 0; i < hidden.numel(); ++i) hidden.data<float>()[i] = normal(rng);
  std::vector<double> ms;
  for (int round = 0; round < 2000; ++round) {
    const auto start = std::chrono::steady_clock::now();
    auto logits = (*preds)->ImageLogits(hidden);
    REQUIRE(logits.ok());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  WARN("image predictor on 257 rows: median " << ms[ms.size() / 2] << " ms");
}

TEST_CASE("dynamic_llava's pruned prefill matches transformers with the pruning of tools/train",
          "[unit][engine][compress][golden]") {
  // predictors_golden.safetensors "prune.*": the bf16 model of transformers with
  // train_predictors.py's physical removal at layer 2 on synthvid test item 42's prompt.
  const auto dir = testing::SourceDir() / "tests/data/golden/framezip-tiny-video";
  auto forward = model::SafetensorsFile::Open(dir / "forward.safetensors");
  auto golden = model::SafetensorsFile::Open(dir / "predictors_golden.safetensors");
  REQUIRE(forward.ok());
  REQUIRE(golden.ok());
  const auto to_f32 = [](const Tensor& t) {
    const auto v = testing::ToFloatVector(t);
    Tensor out = *Tensor::Empty(t.shape(), DType::kF32);
    std::copy(v.begin(), v.end(), out.data<float>());
    return out;
  };
  const Tensor embeds = to_f32(*forward->Get("decoder.hidden_states.0"));
  const Tensor rows = *golden->Get("image.rows");
  const Tensor kept_rows = *golden->Get("prune.kept_rows");
  const int64_t t = embeds.dim(0);
  std::vector<uint8_t> visual(static_cast<size_t>(t), 0);
  for (int64_t i = 0; i < rows.numel(); ++i) visual[rows.data<int32_t>()[i]] = 1;

  runtime::Engine& eng = testing::ShippedEngine();
  auto seq = eng.decoder().NewSequence(eng.kv_pool(), kv::KvFormat::kF16, "dynamic_llava");
  REQUIRE(seq.ok());
  llm::PrefillOptions options;
  options.visual = visual;
  auto logits = eng.decoder().Prefill(**seq, embeds, options);
  REQUIRE(logits.ok());
  const Tensor want = *golden->Get("prune.logits");
  // bf16 activations in transformers, f32 here: the decoder golden's tolerance.
  double err = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    err = std::max<double>(err, std::fabs(logits->data<float>()[i] - want.data<float>()[i]));
    scale = std::max<double>(scale, std::fabs(want.data<float>()[i]));
  }
  CHECK(err / scale < 2e-2);
  const float* got = logits->data<float>();
  const float* w = want.data<float>();
  CHECK(std::max_element(got, got + want.numel()) - got ==
        std::max_element(w, w + want.numel()) - w);
  // The same rows stayed: every text row and the golden's kept visual rows, at their positions.
  std::vector<int32_t> stayed;
  for (int64_t r = 0; r < t; ++r) {
    const bool kept =
        std::find(kept_rows.data<int32_t>(), kept_rows.data<int32_t>() + kept_rows.numel(),
                  static_cast<int32_t>(r)) != kept_rows.data<int32_t>() + kept_rows.numel();
    if (!visual[static_cast<size_t>(r)] || kept) stayed.push_back(static_cast<int32_t>(r));
  }
  CHECK((*seq)->kv.positions(2) == stayed);
  CHECK((*seq)->kv.positions(1).size() == static_cast<size_t>(t));
}

TEST_CASE("dynamic_llava refuses without predictors and rejects bad options",
          "[unit][engine][compress]") {
  auto none = compress::CreatePolicy("dynamic_llava");
  REQUIRE_FALSE(none.ok());
  CHECK(absl::IsFailedPrecondition(none.status()));

  // A model directory without predictors serves every other policy and names what is missing.
  auto plain = runtime::Engine::Load(testing::SourceDir() / "tests/data/models/tiny-ov-qwen2-f32");
  REQUIRE(plain.ok());
  CHECK((*plain)->NewConversation("fastv").ok());
  auto refused = (*plain)->NewConversation("dynamic_llava");
  REQUIRE_FALSE(refused.ok());
  CHECK(absl::IsFailedPrecondition(refused.status()));
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("predictors.safetensors"));

  runtime::Engine& eng = testing::ShippedEngine();
  for (const char* spec :
       {"dynamic_llava:vision_keep=0", "dynamic_llava:vision_keep=1.5", "dynamic_llava:select=best",
        "dynamic_llava:bits=8", "dynamic_llava:text_keep=2", "dynamic_llava:text_threshold=x",
        "dynamic_llava:text_threshold=nan", "dynamic_llava:text_threshold=2e6",
        "dynamic_llava:text_threshold=", "dynamic_llava:colour=red"}) {
    INFO(spec);
    auto c = eng.NewConversation(spec);
    REQUIRE_FALSE(c.ok());
    CHECK(absl::IsInvalidArgument(c.status()));
  }
  auto deep = eng.NewConversation("dynamic_llava:sparse_layer=4");  // the model has 4 layers
  REQUIRE_FALSE(deep.ok());
  CHECK(absl::IsInvalidArgument(deep.status()));
}

TEST_CASE("dynamic_llava with vision_keep = 1 and gating off is exactly none",
          "[unit][engine][compress]") {
  runtime::Engine& eng = testing::ShippedEngine();
  const runtime::Message m =
      testing::SyntheticVideoMessage(6, eng.image_size(), "What color is the cross?");
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 6;
  opt.ignore_eos = true;
  auto dense = *eng.NewConversation("none");
  auto kept = *eng.NewConversation("dynamic_llava:vision_keep=1,text_gate=off");
  auto a = eng.RunTurn(*dense, std::span(&m, 1), opt);
  auto b = eng.RunTurn(*kept, std::span(&m, 1), opt);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->token_ids == b->token_ids);
  const auto la = KvLayers(eng, *dense), lb = KvLayers(eng, *kept);
  REQUIRE(la.size() == lb.size());
  for (size_t l = 0; l < la.size(); ++l) {
    INFO("layer " << l);
    REQUIRE(la[l].pages.size() == lb[l].pages.size());
    for (size_t p = 0; p < la[l].pages.size(); ++p) {
      CHECK(la[l].pages[p].page.positions == lb[l].pages[p].page.positions);
      // Whole page images: pages are handed out zeroed, so even unfilled slots agree.
      CHECK(la[l].pages[p].page.bytes == lb[l].pages[p].page.bytes);
    }
  }
  CHECK(b->stats.prefill_flops_saved == 0);
  CHECK(b->stats.text_tokens_gated == 0);
}

TEST_CASE("dynamic_llava removes the unkept visual rows from sparse_layer on",
          "[unit][engine][compress]") {
  runtime::Engine& eng = testing::ShippedEngine();
  const runtime::Message m =
      testing::SyntheticVideoMessage(6, eng.image_size(), "What color is the cross?");
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 4;
  opt.ignore_eos = true;
  auto c = *eng.NewConversation("dynamic_llava:text_gate=off");
  auto r = eng.RunTurn(*c, std::span(&m, 1), opt);
  REQUIRE(r.ok());
  const runtime::TurnStats& st = r->stats;
  const int64_t visual = st.visual_tokens, kept = visual / 5;  // floor(25 · 0.2)
  REQUIRE(visual == 25);
  CHECK(st.layer_visual_tokens == std::vector<int64_t>{visual, visual, kept, kept});
  CHECK(st.selection_overhead_ms > 0);
  // Two of four layers run without the 20 removed rows.
  const double ratio =
      2.0 * static_cast<double>(visual - kept) / (4.0 * static_cast<double>(st.prefilled_tokens));
  CHECK(st.prefill_flops_saved_ratio == Approx(ratio));
  CHECK(st.prefill_flops_saved > 0);

  const auto layers = KvLayers(eng, *c);
  const std::vector<int32_t> all = LayerPositions(layers[0]);
  CHECK(LayerPositions(layers[1]) == all);
  for (size_t l = 2; l < layers.size(); ++l) {
    const std::vector<int32_t> p = LayerPositions(layers[l]);
    CHECK(static_cast<int64_t>(p.size()) == static_cast<int64_t>(all.size()) - (visual - kept));
    // Original positions, in order, a subset of layer 0's.
    CHECK(std::is_sorted(p.begin(), p.end()));
    CHECK(std::includes(all.begin(), all.end(), p.begin(), p.end()));
  }
  CHECK(LayerPositions(layers[2]) == LayerPositions(layers[3]));

  // The random ranking keeps as many rows (and another set, for this seed).
  auto rnd = *eng.NewConversation("dynamic_llava:select=random,seed=3,text_gate=off");
  auto rr = eng.RunTurn(*rnd, std::span(&m, 1), opt);
  REQUIRE(rr.ok());
  CHECK(rr->stats.layer_visual_tokens == st.layer_visual_tokens);
  CHECK(LayerPositions(KvLayers(eng, *rnd)[2]) != LayerPositions(layers[2]));
}

TEST_CASE("dynamic_llava with bits=4 stores what it keeps in int4 pages, KIVI-style",
          "[unit][engine][compress]") {
  runtime::Engine& eng = testing::ShippedEngine();
  const runtime::Message m =
      testing::SyntheticVideoMessage(6, eng.image_size(), "What color is the cross?");
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 3;
  opt.ignore_eos = true;
  auto dense = *eng.NewConversation("dynamic_llava:text_gate=off");
  auto quant = *eng.NewConversation("dynamic_llava:text_gate=off,bits=4");
  auto a = eng.RunTurn(*dense, std::span(&m, 1), opt);
  auto b = eng.RunTurn(*quant, std::span(&m, 1), opt);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const auto la = KvLayers(eng, *dense), lb = KvLayers(eng, *quant);
  for (size_t l = 0; l < la.size(); ++l) {
    INFO("layer " << l);
    // The same rows kept, prompt pages in int4 (decode tokens in the f16 residual window).
    CHECK(LayerPositions(lb[l]) == LayerPositions(la[l]));
    CHECK(lb[l].pages.front().page.format == kv::KvFormat::kInt4);
  }
  const auto int4 = static_cast<size_t>(kv::KvFormat::kInt4);
  CHECK(b->stats.kv_bytes_by_format[int4] > 0);
  CHECK(b->stats.kv_bytes < a->stats.kv_bytes);
}

TEST_CASE("dynamic_llava text gating at a forced 50% halves KV growth in later layers",
          "[unit][engine][compress]") {
  runtime::Engine& eng = testing::ShippedEngine();
  const runtime::Message m =
      testing::SyntheticVideoMessage(6, eng.image_size(), "What color is the cross?");
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 21;  // 20 of them are fed back as decode steps
  opt.ignore_eos = true;
  auto c = *eng.NewConversation("dynamic_llava:text_keep=0.5");
  const auto before = [&] {
    auto r = eng.RunTurn(*c, std::span(&m, 1), opt);
    REQUIRE(r.ok());
    CHECK(r->stats.text_tokens_gated == 10);
    return r;
  }();
  const auto layers = KvLayers(eng, *c);
  const int64_t prompt = before->stats.prefilled_tokens;
  const int64_t visual_removed = before->stats.visual_tokens - before->stats.visual_tokens / 5;
  CHECK(static_cast<int64_t>(LayerPositions(layers[0]).size()) == prompt + 20);
  CHECK(static_cast<int64_t>(LayerPositions(layers[1]).size()) == prompt + 20);
  for (size_t l = 2; l < layers.size(); ++l) {
    CHECK(static_cast<int64_t>(LayerPositions(layers[l]).size()) == prompt - visual_removed + 10);
  }
}

// The output-text decision is logit 0 − logit 1 > text_threshold: checked token by token on the
// golden's 40 real hidden rows at a threshold between their margins (about half kept), and the
// threshold is read from predictors_config.json (output_text_threshold) as the default: the shipped
// one is calibrated (tools/train/train_predictors.py --calibrate-text-threshold).
TEST_CASE("dynamic_llava keeps generated tokens whose text margin exceeds the threshold",
          "[unit][engine][compress]") {
  auto preds = runtime::LoadDynamicLlavaPredictors(ModelDir(), 128);
  REQUIRE(preds.ok());
  auto shipped_config = model::ReadFileToString(ModelDir() / "predictors_config.json");
  REQUIRE(shipped_config.ok());
  const double shipped_threshold =
      nlohmann::json::parse(*shipped_config).at("output_text_threshold").get<double>();
  CHECK(shipped_threshold > 0);
  CHECK((*preds)->config().text_threshold == shipped_threshold);
  auto golden = model::SafetensorsFile::Open(testing::SourceDir() /
                                             "tests/data/golden/framezip-tiny-video/"
                                             "predictors_golden.safetensors");
  REQUIRE(golden.ok());
  const Tensor hidden = *golden->Get("text.hidden");
  auto logits = (*preds)->TextLogits(hidden);
  REQUIRE(logits.ok());
  const int64_t n = hidden.dim(0), c = hidden.dim(1);
  std::vector<double> margin(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const float* l = logits->data<float>() + 2 * r;
    margin[static_cast<size_t>(r)] = static_cast<double>(l[0]) - static_cast<double>(l[1]);
  }
  std::vector<double> sorted = margin;
  std::sort(sorted.begin(), sorted.end());
  const double mid =
      0.5 * (sorted[static_cast<size_t>(n / 2 - 1)] + sorted[static_cast<size_t>(n / 2)]);
  REQUIRE(sorted[static_cast<size_t>(n / 2 - 1)] < sorted[static_cast<size_t>(n / 2)]);

  const auto decisions = [&](const std::string& spec, const compress::PolicyResources& res) {
    auto policy = compress::CreatePolicy(spec, res);
    INFO(spec << ": " << (policy.ok() ? "" : MessageOf(policy.status())));
    REQUIRE(policy.ok());
    std::vector<int> kept;
    for (int64_t r = 0; r < n; ++r) {
      auto row = hidden.Slice(r, r + 1);
      REQUIRE(row.ok());
      REQUIRE((*policy)->OnDecodeHidden(*row, static_cast<int32_t>(100 + r)).ok());
      CHECK((*policy)->OnDecodeWrite(1, static_cast<int32_t>(100 + r)));  // layers < 2 store all
      kept.push_back((*policy)->OnDecodeWrite(2, static_cast<int32_t>(100 + r)) ? 1 : 0);
    }
    return kept;
  };
  const auto want = [&](double threshold) {
    std::vector<int> kept;
    for (const double m : margin) kept.push_back(m > threshold ? 1 : 0);
    return kept;
  };
  const compress::PolicyResources shipped{*preds};
  const auto half = decisions(fmt::format("dynamic_llava:text_threshold={:.17g}", mid), shipped);
  CHECK(half == want(mid));
  CHECK(std::count(half.begin(), half.end(), 1) == n / 2);
  CHECK(decisions("dynamic_llava", shipped) == want(shipped_threshold));
  CHECK(decisions("dynamic_llava:text_threshold=0", shipped) == want(0.0));
  CHECK(decisions("dynamic_llava:text_threshold=-1000", shipped) == std::vector<int>(n, 1));
  CHECK(decisions("dynamic_llava:text_threshold=1000", shipped) == std::vector<int>(n, 0));

  // A calibrated config sets the default; an option still overrides it.
  testing::TempDir dir;
  std::filesystem::copy_file(ModelDir() / "predictors.safetensors",
                             dir.path() / "predictors.safetensors");
  // The shipped config with its "output_text_threshold" replaced by `value` (raw JSON text).
  const auto write_config = [&](const std::string& value) {
    std::string text = std::regex_replace(
        *shipped_config, std::regex(R"("output_text_threshold"\s*:\s*[^,}]*,?)"), "");
    REQUIRE(text.find("\"output_text_threshold\"") == std::string::npos);
    const size_t at = text.find("\"output_text_keep_rate\"");
    REQUIRE(at != std::string::npos);
    text.insert(at, "\"output_text_threshold\": " + value + ", ");
    std::ofstream(dir.path() / "predictors_config.json") << text;
  };
  write_config(fmt::format("{:.17g}", mid));
  auto calibrated = runtime::LoadDynamicLlavaPredictors(dir.path(), c);
  INFO((calibrated.ok() ? "" : MessageOf(calibrated.status())));
  REQUIRE(calibrated.ok());
  CHECK((*calibrated)->config().text_threshold == Approx(mid).margin(1e-12));
  const compress::PolicyResources with_threshold{*calibrated};
  CHECK(decisions("dynamic_llava", with_threshold) == want(mid));
  CHECK(decisions("dynamic_llava:text_threshold=0", with_threshold) == want(0.0));

  // null is "not set", as in transformers' configs: the argmax rule.
  write_config("null");
  auto unset = runtime::LoadDynamicLlavaPredictors(dir.path(), c);
  REQUIRE(unset.ok());
  CHECK((*unset)->config().text_threshold == 0);

  // An absurd threshold is refused naming the field; one past double's range, as invalid JSON.
  for (const char* value : {"1e300", "-2e6", "1e999", "\"0.5\""}) {
    INFO(value);
    write_config(value);
    auto refused = runtime::LoadDynamicLlavaPredictors(dir.path(), c);
    REQUIRE_FALSE(refused.ok());
    CHECK(absl::IsInvalidArgument(refused.status()));
    const std::string field = std::string(value) == "1e999" ? "1e999" : "output_text_threshold";
    CHECK_THAT(std::string(refused.status().message()), Catch::Contains(field));
  }
}

TEST_CASE("A dynamic_llava conversation restores with its per-layer lengths and continues alike",
          "[unit][engine][compress]") {
  runtime::Engine& eng = testing::ShippedEngine();
  const runtime::Message m =
      testing::SyntheticVideoMessage(6, eng.image_size(), "What color is the cross?");
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 5;
  opt.ignore_eos = true;
  auto c = *eng.NewConversation("dynamic_llava:text_keep=0.5");
  REQUIRE(eng.RunTurn(*c, std::span(&m, 1), opt).ok());
  auto seg = eng.ExportConversation(*c, kv::SegmentMark{}, 1 << 20);
  REQUIRE(seg.ok());
  auto decoded = kv::DecodeSegment(seg->encoded.blocks);
  REQUIRE(decoded.ok());
  auto restored = eng.RestoreConversation(std::span(&*decoded, 1));
  INFO((restored.ok() ? "" : MessageOf(restored.status())));
  REQUIRE(restored.ok());
  runtime::Conversation& twin = *restored->conversation;
  const auto original_layers = KvLayers(eng, *c), twin_layers = KvLayers(eng, twin);
  REQUIRE(original_layers.size() == twin_layers.size());
  for (size_t l = 0; l < original_layers.size(); ++l) {
    CHECK(LayerPositions(original_layers[l]) == LayerPositions(twin_layers[l]));
  }
  const runtime::Message follow{"user", "And what shape was it?", {}};
  auto a = eng.RunTurn(*c, std::span(&follow, 1), opt);
  auto b = eng.RunTurn(twin, std::span(&follow, 1), opt);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->token_ids == b->token_ids);
}

TEST_CASE("dynamic_llava in batched prefill and mixed steps equals separate runs",
          "[unit][engine][compress]") {
  ops::cpu::ScopedF32Gemm f32_gemm;  // batch shapes: see gemm_amx.h
  runtime::Engine& eng = testing::ShippedEngine();
  const llm::Decoder& dec = eng.decoder();
  const int64_t hid = dec.shape().hidden;
  std::mt19937_64 rng(7);
  // A prompt of 8 text rows, 30 visual rows, 6 text rows.
  const int64_t t = 44;
  std::vector<uint8_t> visual(static_cast<size_t>(t), 0);
  std::fill(visual.begin() + 8, visual.begin() + 38, uint8_t{1});
  const Tensor e_prune = testing::RandomEmbeds(t, hid, rng);
  const Tensor e_dense = testing::RandomEmbeds(20, hid, rng);
  auto fresh = [&](const char* policy) {
    auto s = dec.NewSequence(eng.kv_pool(), kv::KvFormat::kF16, policy);
    REQUIRE(s.ok());
    return *std::move(s);
  };
  llm::PrefillOptions with_visual;
  with_visual.visual = visual;

  // Separately.
  auto p1 = fresh("dynamic_llava"), d1 = fresh("none");
  auto lp = dec.Prefill(*p1, e_prune, with_visual);
  auto ld = dec.Prefill(*d1, e_dense);
  REQUIRE(lp.ok());
  REQUIRE(ld.ok());
  CHECK(p1->kv.num_tokens(0) == t);
  CHECK(p1->kv.num_tokens(2) == t - 30 + 6);  // floor(30 · 0.2) = 6 visual rows stay

  // Batched: the pruned sequence's rows leave the batch at layer 2, the other's stay.
  auto p2 = fresh("dynamic_llava"), d2 = fresh("none");
  llm::Sequence* const seqs[] = {d2.get(), p2.get()};
  const Tensor embeds[] = {e_dense, e_prune};
  const llm::PrefillOptions options[] = {{}, with_visual};
  auto batch = dec.PrefillBatch(seqs, embeds, options);
  REQUIRE(batch.ok());
  CHECK(testing::MaxAbsDiff((*batch)[0], *ld) < 1e-4);
  CHECK(testing::MaxAbsDiff((*batch)[1], *lp) < 1e-4);
  for (int l = 0; l < 4; ++l) {
    CHECK(p2->kv.positions(l) == p1->kv.positions(l));
    CHECK(d2->kv.positions(l) == d1->kv.positions(l));
  }

  // A mixed step: a decode token of d1 beside a new pruned prompt, against the same decode on
  // its twin d2 alone and the prompt alone (lp).
  auto p3 = fresh("dynamic_llava");
  const int32_t token = 7;
  llm::Sequence* const alone[] = {d2.get()};
  auto decode_alone = dec.DecodeStep(alone, std::span(&token, 1));
  REQUIRE(decode_alone.ok());
  std::vector<llm::StepInput> inputs(2);
  inputs[0].seq = d1.get();
  inputs[0].token = token;
  inputs[1].seq = p3.get();
  inputs[1].embeds = e_prune;
  inputs[1].visual = visual;
  auto mixed = dec.MixedStep(inputs);
  INFO((mixed.ok() ? "" : MessageOf(mixed.status())));
  REQUIRE(mixed.ok());
  const Tensor mixed_decode = *mixed->Slice(0, 1), mixed_prompt = *mixed->Slice(1, 2);
  CHECK(testing::MaxAbsDiff(mixed_decode, *decode_alone) < 1e-4);
  CHECK(testing::MaxAbsDiff(mixed_prompt, *lp) < 1e-4);
  for (int l = 0; l < 4; ++l) CHECK(p3->kv.positions(l) == p1->kv.positions(l));
}

}  // namespace
}  // namespace framezip::engine
