#include "engine/model/weights.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <limits>

#include "engine/core/float8.h"
#include "engine/core/half.h"
#include "tests/unit/engine/model/model_test_util.h"

namespace framezip::engine::model {
namespace {

using test::ModelDir;
using test::WriteFile;

LlavaConfig Config(const std::string& name) {
  auto c = LoadLlavaConfig(ModelDir(name));
  REQUIRE(c.ok());
  return *c;
}

// Copies every tensor of a model under new names (rename returns "" to drop a tensor) and
// optionally replaces some tensors.
void RewriteModelAt(const std::filesystem::path& from, const std::filesystem::path& out,
                    const std::function<std::string(const std::string&)>& rename,
                    const std::map<std::string, Tensor>& replace = {}) {
  auto m = SafetensorsModel::Open(from);
  REQUIRE(m.ok());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : m->Names()) {
    const std::string to = rename(n);
    if (to.empty()) continue;
    auto it = replace.find(n);
    if (it != replace.end()) {
      tensors.emplace_back(to, it->second);
      continue;
    }
    auto t = m->Get(n);
    REQUIRE(t.ok());
    tensors.emplace_back(to, *t);
  }
  REQUIRE(WriteSafetensors(out / "model.safetensors", tensors).ok());
}

void RewriteModel(const std::string& name, const std::filesystem::path& out,
                  const std::function<std::string(const std::string&)>& rename,
                  const std::map<std::string, Tensor>& replace = {}) {
  RewriteModelAt(ModelDir(name), out, rename, replace);
}

TEST_CASE("weights: canonical names for every layout transformers has written", "[unit][engine]") {
  CHECK(CanonicalName("language_model.model.layers.3.self_attn.q_proj.weight") ==
        "model.language_model.layers.3.self_attn.q_proj.weight");
  CHECK(CanonicalName("language_model.lm_head.weight") == "lm_head.weight");
  CHECK(CanonicalName("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight") ==
        "model.vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight");
  CHECK(CanonicalName("vision_tower.encoder.layers.0.mlp.fc1.weight") ==
        "model.vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight");
  CHECK(CanonicalName("model.vision_tower.embeddings.patch_embedding.weight") ==
        "model.vision_tower.vision_model.embeddings.patch_embedding.weight");
  CHECK(CanonicalName("multi_modal_projector.linear_1.bias") ==
        "model.multi_modal_projector.linear_1.bias");
  CHECK(CanonicalName("image_newline") == "model.image_newline");
  CHECK(CanonicalName("image_newline_extra") == "image_newline_extra");
  CHECK(CanonicalName("model.language_model.norm.weight") == "model.language_model.norm.weight");
  CHECK(CanonicalName("lm_head.weight") == "lm_head.weight");
  CHECK(TextLayerName(3, "self_attn.q_proj.weight") ==
        "model.language_model.layers.3.self_attn.q_proj.weight");
  CHECK(VisionLayerName(1, "mlp.fc2.bias") ==
        "model.vision_tower.vision_model.encoder.layers.1.mlp.fc2.bias");
}

TEST_CASE("weights: the tiny OneVision model binds, tied head, stored dtype", "[unit][engine]") {
  for (const char* name : {"tiny-ov-qwen2-f32", "tiny-ov-qwen2-bf16"}) {
    INFO(name);
    const LlavaConfig c = Config(name);
    auto w = ModelWeights::Load(ModelDir(name), c);
    REQUIRE(w.ok());
    CHECK(w->scheme() == KeyScheme::kLegacy);
    CHECK(w->dtype() ==
          (std::string(name).find("bf16") != std::string::npos ? DType::kBF16 : DType::kF32));
    const Tensor& embed = w->Get(TextName("embed_tokens.weight"));
    CHECK(embed.shape() == Shape{448, 64});
    CHECK(w->Get(kLmHead).raw_data() == embed.raw_data());  // tied: the same bytes
    CHECK(w->Get(kImageNewline).shape() == Shape{64});
    CHECK(w->Get(ProjectorName("linear_1.weight")).shape() == Shape{64, 32});
    CHECK(w->StoredName(VisionName("embeddings.patch_embedding.weight")) ==
          "vision_tower.embeddings.patch_embedding.weight");
    const TextLayerWeights l = w->TextLayer(1);
    CHECK(l.q_proj.shape() == Shape{64, 64});
    CHECK(l.k_proj.shape() == Shape{32, 64});
    CHECK(l.q_bias.defined());
    CHECK_FALSE(l.o_bias.defined());
    CHECK_FALSE(l.gate_bias.defined());
    const VisionLayerWeights v = w->VisionLayer(0);
    CHECK(v.fc1.shape() == Shape{64, 32});
    CHECK(v.out_bias.shape() == Shape{32});
    CHECK(w->Has(VisionName("post_layernorm.weight")));
  }
}

TEST_CASE("weights: CLIP + Llama binds with an untied head", "[unit][engine]") {
  const LlavaConfig c = Config("tiny-llava-clip-llama-f32");
  auto w = ModelWeights::Load(ModelDir("tiny-llava-clip-llama-f32"), c);
  REQUIRE(w.ok());
  CHECK(w->Get(kLmHead).raw_data() != w->Get(TextName("embed_tokens.weight")).raw_data());
  CHECK(w->Get(VisionName("embeddings.class_embedding")).shape() == Shape{32});
  CHECK(w->Get(VisionName("embeddings.position_embedding.weight")).shape() == Shape{17, 32});
  CHECK(w->Has(VisionName("pre_layrnorm.weight")));
  CHECK_FALSE(w->Has(VisionName("embeddings.patch_embedding.bias")));
  CHECK_FALSE(w->TextLayer(0).q_bias.defined());

  testing::TempDir dir;
  RewriteModel("tiny-llava-clip-llama-f32", dir.path(),
               [](const std::string& n) { return n == "language_model.lm_head.weight" ? "" : n; });
  auto missing = ModelWeights::Load(dir.path(), c);
  CHECK(MessageOf(missing.status()) == "missing tensor lm_head.weight");
}

TEST_CASE("weights: the current (model.*) name scheme binds to the same tensors",
          "[unit][engine]") {
  const LlavaConfig c = Config("tiny-ov-qwen2-f32");
  testing::TempDir dir;
  RewriteModel("tiny-ov-qwen2-f32", dir.path(), [](const std::string& n) {
    std::string canonical = CanonicalName(n);
    return canonical;
  });
  auto current = ModelWeights::Load(dir.path(), c);
  REQUIRE(current.ok());
  CHECK(current->scheme() == KeyScheme::kCurrent);
  auto legacy = ModelWeights::Load(ModelDir("tiny-ov-qwen2-f32"), c);
  REQUIRE(legacy.ok());
  CHECK(current->Names() == legacy->Names());
  const std::string q = TextLayerName(1, "self_attn.q_proj.weight");
  CHECK(std::memcmp(current->Get(q).raw_data(), legacy->Get(q).raw_data(),
                    legacy->Get(q).nbytes()) == 0);

  // The hub layout: vision_tower.vision_model.* and an explicit (ignored) lm_head for a tied
  // model.
  testing::TempDir hub;
  RewriteModel("tiny-ov-qwen2-f32", hub.path(), [](const std::string& n) {
    const std::string p = "vision_tower.";
    return n.rfind(p, 0) == 0 ? "vision_tower.vision_model." + n.substr(p.size()) : n;
  });
  auto h = ModelWeights::Load(hub.path(), c);
  REQUIRE(h.ok());
  CHECK(h->StoredName(VisionName("post_layernorm.bias")) ==
        "vision_tower.vision_model.post_layernorm.bias");
}

TEST_CASE("weights: the first problem is named", "[unit][engine]") {
  const LlavaConfig c = Config("tiny-ov-qwen2-f32");
  testing::TempDir dir;
  SECTION("missing tensor") {
    RewriteModel("tiny-ov-qwen2-f32", dir.path(), [](const std::string& n) {
      return n == "language_model.model.layers.1.self_attn.q_proj.weight" ? "" : n;
    });
    auto w = ModelWeights::Load(dir.path(), c);
    CHECK(w.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(MessageOf(w.status()) ==
          "missing tensor model.language_model.layers.1.self_attn.q_proj.weight");
  }
  SECTION("wrong shape") {
    auto t = Tensor::Zeros({64, 64}, DType::kF32);
    REQUIRE(t.ok());
    RewriteModel("tiny-ov-qwen2-f32", dir.path(), [](const std::string& n) { return n; },
                 {{"language_model.model.layers.0.mlp.up_proj.weight", *t}});
    auto w = ModelWeights::Load(dir.path(), c);
    CHECK(MessageOf(w.status()) ==
          "tensor model.language_model.layers.0.mlp.up_proj.weight (stored as "
          "language_model.model.layers.0.mlp.up_proj.weight) has shape [64, 64], expected "
          "[128, 64] (in model.safetensors)");
  }
  SECTION("wrong dtype") {
    auto t = Tensor::Zeros({64}, DType::kI32);
    REQUIRE(t.ok());
    RewriteModel("tiny-ov-qwen2-f32", dir.path(), [](const std::string& n) { return n; },
                 {{"image_newline", *t}});
    auto w = ModelWeights::Load(dir.path(), c);
    CHECK_THAT(MessageOf(w.status()),
               Catch::StartsWith("tensor model.image_newline") && Catch::Contains("dtype I32"));
  }
  SECTION("two stored names for one tensor") {
    auto m = SafetensorsModel::Open(ModelDir("tiny-ov-qwen2-f32"));
    REQUIRE(m.ok());
    auto nl = m->Get("image_newline");
    REQUIRE(nl.ok());
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& n : m->Names()) tensors.emplace_back(n, *m->Get(n));
    tensors.emplace_back("model.image_newline", *nl);
    REQUIRE(WriteSafetensors(dir / "model.safetensors", tensors).ok());
    auto w = ModelWeights::Load(dir.path(), c);
    CHECK_THAT(MessageOf(w.status()), Catch::Contains("are both model.image_newline"));
  }
  SECTION("unknown model type") {
    WriteFile(dir / "config.json", R"({"model_type": "paligemma"})");
    auto bad = LoadLlavaConfig(dir.path());
    CHECK(bad.status().code() == absl::StatusCode::kUnimplemented);
    CHECK_THAT(MessageOf(bad.status()), Catch::Contains("model_type 'paligemma'"));
  }
}

TEST_CASE("weights: a compressed-tensors int8 checkpoint binds its projections with their scales",
          "[unit][engine]") {
  const std::filesystem::path int8_dir = test::GoldenDir("framezip-tiny-video-int8/model");
  auto config = LoadLlavaConfig(int8_dir);
  REQUIRE(config.ok());
  auto w = ModelWeights::Load(int8_dir, *config);
  INFO((w.ok() ? "" : MessageOf(w.status())));
  REQUIRE(w.ok());
  auto stored = SafetensorsModel::Open(int8_dir);
  REQUIRE(stored.ok());
  const std::string up = "language_model.model.layers.1.mlp.up_proj.weight";
  const TextLayerWeights layer = w->TextLayer(1);
  CHECK(layer.up_proj.dtype() == DType::kI8);
  CHECK(w->TextLayer(0).q_proj.dtype() == DType::kI8);
  CHECK(w->Get(VisionLayerName(0, "mlp.fc1.weight")).dtype() == DType::kBF16);  // ignored: bf16
  const Tensor& scale = w->Get(TextLayerName(1, "mlp.up_proj.weight_scale"));
  const Tensor want = *stored->Get(up + "_scale");  // bf16 [N, 1]
  REQUIRE(scale.dtype() == DType::kF32);
  REQUIRE(scale.shape() == Shape{want.shape()[0]});
  for (int64_t j = 0; j < scale.shape()[0]; ++j) {
    REQUIRE(scale.data<float>()[j] == BF16ToF32(want.data<BFloat16>()[j]));
  }

  testing::TempDir dir;
  const auto keep = [](const std::string& n) { return n; };
  SECTION("a projection without its scales") {
    RewriteModelAt(int8_dir, dir.path(),
                   [&](const std::string& n) { return n == up + "_scale" ? "" : n; });
    CHECK_THAT(MessageOf(ModelWeights::Load(dir.path(), *config).status()),
               Catch::Contains("is int8 but model.language_model.layers.1.mlp.up_proj."
                               "weight_scale is missing"));
  }
  SECTION("scales of the wrong shape") {
    auto bad = Tensor::Zeros({3, 1}, DType::kBF16);
    REQUIRE(bad.ok());
    RewriteModelAt(int8_dir, dir.path(), keep, {{up + "_scale", *bad}});
    CHECK_THAT(MessageOf(ModelWeights::Load(dir.path(), *config).status()),
               Catch::Contains("has shape [3, 1], expected [384, 1] or [384]"));
  }
  SECTION("a negative or NaN scale") {
    Tensor bad = *Tensor::Empty({384, 1}, DType::kF32);
    std::fill_n(bad.data<float>(), 384, 0.01f);
    const float value = GENERATE(-0.5f, std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::infinity());
    bad.data<float>()[200] = value;
    RewriteModelAt(int8_dir, dir.path(), keep, {{up + "_scale", bad}});
    CHECK_THAT(MessageOf(ModelWeights::Load(dir.path(), *config).status()),
               Catch::Contains("of channel 200 is not a finite value >= 0"));
  }
  SECTION("asymmetric: a non-zero zero point") {
    auto m = SafetensorsModel::Open(int8_dir);
    REQUIRE(m.ok());
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& n : m->Names()) tensors.emplace_back(n, *m->Get(n));
    auto zp = Tensor::Zeros({384, 1}, DType::kI8);
    REQUIRE(zp.ok());
    zp->data<int8_t>()[7] = 3;
    tensors.emplace_back(up + "_zero_point", *zp);
    REQUIRE(WriteSafetensors(dir / "model.safetensors", tensors).ok());
    const Status s = ModelWeights::Load(dir.path(), *config).status();
    CHECK(s.code() == absl::StatusCode::kUnimplemented);
    CHECK_THAT(MessageOf(s), Catch::Contains("asymmetric"));
  }
  SECTION("int8 where the checkpoint may not have it") {
    auto i8 = Tensor::Zeros({128, 128}, DType::kI8);
    REQUIRE(i8.ok());
    // The projector is not one of the decoder's projections.
    RewriteModelAt(int8_dir, dir.path(), keep, {{"multi_modal_projector.linear_2.weight", *i8}});
    CHECK_THAT(MessageOf(ModelWeights::Load(dir.path(), *config).status()),
               Catch::Contains("dtype I8") && Catch::Contains("only for the decoder's"));
    // A checkpoint whose config declares no quantisation.
    const LlavaConfig plain = Config("tiny-ov-qwen2-f32");
    auto q = Tensor::Zeros({64, 64}, DType::kI8);
    REQUIRE(q.ok());
    RewriteModel("tiny-ov-qwen2-f32", dir.path(), keep,
                 {{"language_model.model.layers.0.self_attn.q_proj.weight", *q}});
    CHECK_THAT(MessageOf(ModelWeights::Load(dir.path(), plain).status()),
               Catch::Contains("dtype I8"));
  }
}

TEST_CASE("weights: a compressed-tensors FP8 checkpoint binds its projections decoded to bf16",
          "[unit][engine]") {
  const std::filesystem::path fp8_dir = test::GoldenDir("framezip-tiny-video-fp8/model");
  auto config = LoadLlavaConfig(fp8_dir);
  REQUIRE(config.ok());
  auto w = ModelWeights::Load(fp8_dir, *config);
  INFO((w.ok() ? "" : MessageOf(w.status())));
  REQUIRE(w.ok());
  auto stored = SafetensorsModel::Open(fp8_dir);
  REQUIRE(stored.ok());
  const std::string up = "language_model.model.layers.1.mlp.up_proj.weight";
  const Tensor q = *stored->Get(up);                 // F8_E4M3 [384, 128]
  const Tensor scale = *stored->Get(up + "_scale");  // bf16 [384, 1]
  REQUIRE(q.dtype() == DType::kF8E4M3);
  // Every element is q · scale computed in f64, rounded once to bf16; no scale tensor is kept.
  const Tensor& got = w->TextLayer(1).up_proj;
  REQUIRE(got.dtype() == DType::kBF16);
  REQUIRE(got.shape() == q.shape());
  const int64_t n = q.dim(0), k = q.dim(1);
  int64_t mismatches = 0;
  for (int64_t row = 0; row < n; ++row) {
    const double s = BF16ToF32(scale.data<BFloat16>()[row]);
    for (int64_t col = 0; col < k; ++col) {
      const double want = static_cast<double>(F8E4M3ToF32(q.data<Float8E4M3>()[row * k + col])) * s;
      const float got_value = BF16ToF32(got.data<BFloat16>()[row * k + col]);
      mismatches += got_value != BF16ToF32(F32ToBF16(static_cast<float>(want)));
    }
  }
  CHECK(mismatches == 0);
  // The scale is consumed: a tensor of that name would read as an int8 weight's scale.
  CHECK_FALSE(w->Has(TextLayerName(1, "mlp.up_proj.weight_scale")));
  CHECK(w->TextLayer(0).q_proj.dtype() == DType::kBF16);
  CHECK(w->Get(VisionLayerName(0, "mlp.fc1.weight")).dtype() == DType::kBF16);  // ignored: bf16

  testing::TempDir dir;
  const auto keep = [](const std::string& n) { return n; };
  SECTION("one scale for the whole tensor stands for every channel") {
    Tensor one = *Tensor::Empty({1}, DType::kF32);
    one.data<float>()[0] = 0.25f;
    RewriteModelAt(fp8_dir, dir.path(), keep, {{up + "_scale", one}});
    auto rebound = ModelWeights::Load(dir.path(), *config);
    INFO((rebound.ok() ? "" : MessageOf(rebound.status())));
    REQUIRE(rebound.ok());
    const Tensor& t = rebound->TextLayer(1).up_proj;
    for (int64_t i : {int64_t{0}, k + 5, n * k - 1}) {
      CHECK(BF16ToF32(t.data<BFloat16>()[i]) == F8E4M3ToF32(q.data<Float8E4M3>()[i]) * 0.25f);
    }
  }
  SECTION("a projection without its scales") {
    RewriteModelAt(fp8_dir, dir.path(),
                   [&](const std::string& n) { return n == up + "_scale" ? "" : n; });
    CHECK_THAT(MessageOf(ModelWeights::Load(dir.path(), *config).status()),
               Catch::Contains("is FP8 but model.language_model.layers.1.mlp.up_proj."
                               "weight_scale is missing"));
  }
  SECTION("scales of the wrong shape") {
    auto bad = Tensor::Zeros({2}, DType::kBF16);
    REQUIRE(bad.ok());
    RewriteModelAt(fp8_dir, dir.path(), keep, {{up + "_scale", *bad}});
    CHECK_THAT(MessageOf(ModelWeights::Load(dir.path(), *config).status()),
               Catch::Contains("has shape [2], expected [384, 1] or [384], [1] or []"));
  }
  SECTION("a NaN code in the weights (a damaged file)") {
    Tensor damaged = *Tensor::Empty(q.shape(), DType::kF8E4M3);
    std::copy_n(q.data<Float8E4M3>(), q.numel(), damaged.data<Float8E4M3>());
    damaged.data<Float8E4M3>()[5 * k + 9] = Float8E4M3{0xff};
    RewriteModelAt(fp8_dir, dir.path(), keep, {{up, damaged}});
    const Status s = ModelWeights::Load(dir.path(), *config).status();
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(s), Catch::Contains("up_proj.weight holds an FP8 NaN code at row 5, "
                                             "column 9"));
  }
  SECTION("FP8 where the checkpoint may not have it") {
    auto f8 = Tensor::Zeros({128, 128}, DType::kF8E4M3);
    REQUIRE(f8.ok());
    RewriteModelAt(fp8_dir, dir.path(), keep, {{"multi_modal_projector.linear_2.weight", *f8}});
    CHECK_THAT(MessageOf(ModelWeights::Load(dir.path(), *config).status()),
               Catch::Contains("dtype F8_E4M3") && Catch::Contains("only for the decoder's"));
    // FP8 weights in a checkpoint whose config declares int8.
    const std::filesystem::path int8_dir = test::GoldenDir("framezip-tiny-video-int8/model");
    auto int8_config = LoadLlavaConfig(int8_dir);
    REQUIRE(int8_config.ok());
    auto q_f8 = Tensor::Zeros({128, 128}, DType::kF8E4M3);
    RewriteModelAt(int8_dir, dir.path(), keep,
                   {{"language_model.model.layers.0.self_attn.q_proj.weight", *q_f8}});
    CHECK_THAT(MessageOf(ModelWeights::Load(dir.path(), *int8_config).status()),
               Catch::Contains("dtype F8_E4M3"));
  }
}

TEST_CASE("weights: expected tensors follow the 0.5B-OV shapes", "[unit][engine]") {
  auto c = ParseLlavaConfig(R"({
    "model_type": "llava_onevision",
    "text_config": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                    "num_hidden_layers": 24, "num_attention_heads": 14,
                    "num_key_value_heads": 2, "vocab_size": 152000, "tie_word_embeddings": true},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
                      "intermediate_size": 4304, "num_hidden_layers": 26,
                      "num_attention_heads": 16, "image_size": 384, "patch_size": 14}})");
  REQUIRE(c.ok());
  const auto expected = ExpectedTensors(*c);
  size_t required = 0;
  std::map<std::string, Shape> shapes;
  for (const auto& e : expected) {
    required += e.required ? 1 : 0;
    shapes[e.name] = e.shape;
  }
  // docs/models.md §5.1: the 0.5B checkpoint has 716 tensors = 714 required (LLM 24·12+2 = 290,
  // vision 26·16+3 = 419, projector 4, newline 1) + post_layernorm (2, optional); lm_head is
  // tied and optional.
  CHECK(required == 290 + 419 + 4 + 1);
  CHECK(shapes.at(TextLayerName(0, "self_attn.k_proj.weight")) == Shape{128, 896});
  CHECK(shapes.at(TextLayerName(0, "mlp.down_proj.weight")) == Shape{896, 4864});
  CHECK(shapes.at(VisionName("embeddings.patch_embedding.weight")) == Shape{1152, 3, 14, 14});
  CHECK(shapes.at(VisionName("embeddings.position_embedding.weight")) == Shape{729, 1152});
  CHECK(shapes.at(ProjectorName("linear_1.weight")) == Shape{896, 1152});
  CHECK(shapes.at(std::string(kLmHead)) == Shape{152000, 896});
}

}  // namespace
}  // namespace framezip::engine::model
