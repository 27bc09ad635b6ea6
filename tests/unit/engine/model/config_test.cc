#include "engine/model/config.h"

#include <catch2/catch.hpp>

#include "tests/unit/engine/model/model_test_util.h"

namespace framezip::engine::model {
namespace {

using test::ModelDir;

TEST_CASE("config: the tiny OneVision model parses with every field", "[unit][engine]") {
  auto c = LoadLlavaConfig(ModelDir("tiny-ov-qwen2-f32"));
  REQUIRE(c.ok());
  CHECK(c->arch == LlavaArch::kLlavaOnevision);
  CHECK(c->text.arch == TextArch::kQwen2);
  CHECK(c->text.hidden_size == 64);
  CHECK(c->text.num_hidden_layers == 2);
  CHECK(c->text.num_attention_heads == 4);
  CHECK(c->text.num_key_value_heads == 2);
  CHECK(c->text.head_dim == 16);
  CHECK(c->text.intermediate_size == 128);
  CHECK(c->text.vocab_size == 448);
  CHECK(c->text.rms_norm_eps == 1e-6);
  CHECK(c->text.rope_theta == 1e6);  // from v5 "rope_parameters"
  CHECK(c->text.rope_scaling.type == RopeScaling::Type::kDefault);
  CHECK(c->text.qkv_bias);
  CHECK_FALSE(c->text.o_bias);
  CHECK(c->text.hidden_act == Activation::kSilu);
  CHECK(c->tie_word_embeddings);
  CHECK(c->vision.arch == VisionArch::kSiglip);
  CHECK(c->vision.image_size == 32);
  CHECK(c->vision.patch_size == 8);
  CHECK(c->vision.num_patches() == 16);
  CHECK(c->vision.num_positions() == 16);
  CHECK(c->vision.hidden_act == Activation::kGeluTanh);
  CHECK(c->vision.layer_norm_eps == 1e-6);
  CHECK(c->image_token_id == 403);
  CHECK(c->video_token_id == 404);
  CHECK(c->vision_feature_layers == std::vector<int64_t>{-1});
  CHECK(c->vision_feature_select_strategy == FeatureSelect::kFull);
  CHECK(c->projector_hidden_act == Activation::kGeluErf);
  CHECK(c->projector_bias);
  CHECK(c->has_image_newline);
  CHECK(c->anyres_max_tiles == 9);
  CHECK(c->image_grid_pinpoints.size() == 9);
  CHECK(c->image_grid_pinpoints[1] == std::pair<int64_t, int64_t>{32, 64});
  // generation_config.json
  CHECK(c->generation.eos_token_ids == std::vector<int64_t>{402});
  CHECK(c->generation.pad_token_id == 400);
}

TEST_CASE("config: the tiny CLIP+Llama LLaVA model parses", "[unit][engine]") {
  auto c = LoadLlavaConfig(ModelDir("tiny-llava-clip-llama-f32"));
  REQUIRE(c.ok());
  CHECK(c->arch == LlavaArch::kLlava);
  CHECK(c->text.arch == TextArch::kLlama);
  CHECK_FALSE(c->text.qkv_bias);
  CHECK(c->text.rms_norm_eps == 1e-5);
  CHECK(c->vision.arch == VisionArch::kClip);
  CHECK(c->vision.num_positions() == 17);  // + class token
  CHECK(c->vision.hidden_act == Activation::kQuickGelu);
  CHECK(c->vision_feature_layers == std::vector<int64_t>{-2});
  CHECK(c->vision_feature_select_strategy == FeatureSelect::kDefault);
  CHECK_FALSE(c->has_image_newline);
  CHECK_FALSE(c->tie_word_embeddings);
}

TEST_CASE("config: absent fields take the published class defaults", "[unit][engine]") {
  // The llava-hf OV 0.5B config, minus everything that has a default.
  auto c = ParseLlavaConfig(R"({
    "model_type": "llava_onevision",
    "text_config": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                    "num_hidden_layers": 24, "num_attention_heads": 14,
                    "num_key_value_heads": 2, "vocab_size": 152000, "rope_theta": 1000000.0,
                    "tie_word_embeddings": true},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
                      "intermediate_size": 4304, "num_hidden_layers": 26,
                      "num_attention_heads": 16, "image_size": 384, "patch_size": 14}
  })");
  REQUIRE(c.ok());
  CHECK(c->image_token_id == 151646);
  CHECK(c->video_token_id == 151647);
  CHECK(c->text.head_dim == 64);
  CHECK(c->text.rms_norm_eps == 1e-6);
  CHECK(c->text.max_position_embeddings == 32768);
  CHECK(c->vision.layer_norm_eps == 1e-6);
  CHECK(c->vision.hidden_act == Activation::kGeluTanh);
  CHECK(c->vision.num_patches() == 729);
  CHECK(c->image_grid_pinpoints.size() == 36);
  CHECK(c->image_grid_pinpoints.back() == std::pair<int64_t, int64_t>{2304, 2304});
  CHECK(c->vision_feature_layers == std::vector<int64_t>{-1});
  CHECK(c->projector_bias);
  // docs/models.md §1.1: top-level false + text_config true => tied.
  CHECK(c->tie_word_embeddings);

  // No sub-configs at all: the wrapper's default towers.
  auto d = ParseLlavaConfig(R"({"model_type": "llava_onevision"})");
  REQUIRE(d.ok());
  CHECK(d->text.vocab_size == 151936);
  CHECK(d->text.hidden_size == 4096);
  CHECK(d->vision.num_hidden_layers == 26);
  CHECK(d->vision.num_attention_heads == 16);
  CHECK(d->vision.hidden_size == 1152);
  CHECK_FALSE(d->tie_word_embeddings);
  auto l = ParseLlavaConfig(R"({"model_type": "llava"})");
  REQUIRE(l.ok());
  CHECK(l->image_token_id == 32000);
  CHECK(l->vision.image_size == 336);
  CHECK(l->vision.layer_norm_eps == 1e-5);
  CHECK(l->text.bos_token_id == 1);
  CHECK(l->vision_feature_select_strategy == FeatureSelect::kDefault);
}

TEST_CASE("config: rope scaling, list feature layers and aliases", "[unit][engine]") {
  auto c = ParseLlavaConfig(R"({
    "model_type": "llava_next_video", "image_token_id": 7, "video_token_id": 8,
    "vision_feature_layer": [-2, -5],
    "text_config": {"model_type": "llama", "vocab_size": 100, "hidden_size": 64,
                    "num_attention_heads": 4, "num_key_value_heads": 1, "num_hidden_layers": 2,
                    "intermediate_size": 96, "attention_bias": true, "head_dim": 32,
                    "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8192},
                    "rope_theta": 500000.0, "eos_token_id": [5, 6]}
  })");
  REQUIRE(c.ok());
  CHECK(c->image_token_id == 7);
  CHECK(c->video_token_id == 8);
  CHECK(c->vision_feature_layer_is_list);
  CHECK(c->vision_feature_layers == std::vector<int64_t>{-2, -5});
  CHECK(c->projector_input_dim() == 2 * 1024);
  CHECK(c->text.head_dim == 32);
  CHECK(c->text.q_dim() == 128);
  CHECK(c->text.kv_dim() == 32);
  CHECK(c->text.qkv_bias);
  CHECK(c->text.o_bias);
  CHECK(c->text.rope_scaling.type == RopeScaling::Type::kLlama3);
  CHECK(c->text.rope_scaling.factor == 8.0);
  CHECK(c->generation.eos_token_ids == std::vector<int64_t>{5});
  CHECK(c->spatial_pool_stride == 2);
  CHECK(c->spatial_pool_mode == "average");
  CHECK(c->image_grid_pinpoints.size() == 5);
}

TEST_CASE("config: errors name the file and the field", "[unit][engine]") {
  auto unknown = ParseLlavaConfig(R"({"model_type": "qwen2_vl"})");
  CHECK(unknown.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(unknown.status()), Catch::Contains("qwen2_vl"));

  auto text = ParseLlavaConfig(
      R"({"model_type": "llava_onevision", "text_config": {"model_type": "gemma"}})");
  CHECK(text.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(text.status()),
             Catch::Contains("text_config.model_type") && Catch::Contains("gemma"));

  auto type = ParseLlavaConfig(
      R"({"model_type": "llava_onevision", "text_config": {"hidden_size": "big"}})");
  CHECK(type.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MessageOf(type.status()) ==
        "config.json: text_config.hidden_size: expected an integer, got string");

  auto div = ParseLlavaConfig(R"({"model_type": "llava_onevision",
      "text_config": {"hidden_size": 100, "num_attention_heads": 3}})");
  CHECK_THAT(MessageOf(div.status()), Catch::Contains("not divisible"));

  auto act =
      ParseLlavaConfig(R"({"model_type": "llava_onevision", "projector_hidden_act": "mish"})");
  CHECK(act.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(act.status()),
             Catch::Contains("projector_hidden_act") && Catch::Contains("mish"));

  auto layer = ParseLlavaConfig(R"({"model_type": "llava_onevision", "vision_feature_layer": 40})");
  CHECK_THAT(MessageOf(layer.status()), Catch::Contains("vision_feature_layer"));

  auto rope = ParseLlavaConfig(R"({"model_type": "llava_onevision",
      "text_config": {"rope_scaling": {"type": "yarn", "factor": 4.0}}})");
  CHECK(rope.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(rope.status()), Catch::Contains("yarn"));

  auto quantised = ParseLlavaConfig(R"({"model_type": "llava_onevision",
      "quantization_config": {"quant_method": "compressed-tensors", "format": "int-quantized"}})");
  CHECK(quantised.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(quantised.status()), Catch::Contains("config_groups") &&
                                                Catch::Contains("int-quantized") &&
                                                Catch::Contains("--weight-format int8"));
  auto gptq = ParseLlavaConfig(R"({"model_type": "llava_onevision",
      "text_config": {"quantization_config": {"quant_method": "gptq", "bits": 4}}})");
  CHECK(gptq.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(gptq.status()), Catch::Contains("gptq"));

  auto bad_json = ParseLlavaConfig("{\"model_type\": ");
  CHECK(bad_json.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(MessageOf(bad_json.status()), Catch::StartsWith("config.json: invalid JSON"));

  auto missing = LoadLlavaConfig("/nonexistent/dir");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("config: a compressed-tensors int8 per-channel checkpoint is read, other layouts refused",
          "[unit][engine]") {
  // The config compressed-tensors itself wrote (tools/golden/gen_quantized_checkpoint.py).
  const Json written =
      test::LoadJson(test::GoldenDir("framezip-tiny-video-int8/model/config.json"));
  auto parse = [](const Json& j) { return ParseLlavaConfig(j.dump()); };
  auto accepted = parse(written);
  INFO((accepted.ok() ? "" : MessageOf(accepted.status())));
  REQUIRE(accepted.ok());
  CHECK(accepted->stored_quantization == StoredQuantization::kInt8PerChannel);
  auto plain = LoadLlavaConfig(ModelDir("tiny-ov-qwen2-f32"));
  REQUIRE(plain.ok());
  CHECK(plain->stored_quantization == StoredQuantization::kNone);
  // Weights-only (W8A16): no input_activations.
  Json weights_only = written;
  weights_only["quantization_config"]["config_groups"]["group_0"].erase("input_activations");
  CHECK(parse(weights_only).ok());

  // Each change names the field that is not loaded, and its value.
  struct Change {
    const char* pointer;  // JSON pointer under quantization_config
    Json value;
    const char* named;
  };
  const Change changes[] = {
      {"/quant_method", "gptq", "gptq"},
      {"/format", "pack-quantized", "quantization_config.format is \"pack-quantized\""},
      {"/format", "float-quantized", "group_0.format is \"int-quantized\""},
      {"/config_groups/group_0/format", "float-quantized", "group_0.format"},
      {"/config_groups/group_0/weights/num_bits", 4, "weights.num_bits is 4"},
      {"/config_groups/group_0/weights/type", "float", "weights.type is \"float\""},
      {"/config_groups/group_0/weights/symmetric", false, "weights.symmetric is false"},
      {"/config_groups/group_0/weights/strategy", "group", "weights.strategy is \"group\""},
      {"/config_groups/group_0/weights/group_size", 128, "weights.group_size is 128"},
      {"/config_groups/group_0/input_activations/dynamic", false,
       "input_activations.dynamic is false"},
      {"/config_groups/group_0/input_activations/strategy", "tensor",
       "input_activations.strategy is \"tensor\""},
      {"/config_groups/group_0/targets", Json::array({"Linear", "Embedding"}), "targets"},
      {"/config_groups/group_0/output_activations", Json::object({{"num_bits", 8}}),
       "output_activations"},
      {"/kv_cache_scheme", Json::object({{"num_bits", 8}}), "kv_cache_scheme"},
      {"/sparsity_config", Json::object({{"format", "sparse-bitmask"}}), "sparsity_config"},
      {"/quantization_status", "frozen", "quantization_status is \"frozen\""},
  };
  for (const Change& c : changes) {
    Json j = written;
    j["quantization_config"][Json::json_pointer(c.pointer)] = c.value;
    const Status s = parse(j).status();
    CAPTURE(c.pointer, MessageOf(s));
    CHECK(s.code() == absl::StatusCode::kUnimplemented);
    CHECK_THAT(MessageOf(s), Catch::Contains(c.named));
  }
}

TEST_CASE(
    "config: a compressed-tensors FP8 checkpoint is read with per-channel or per-tensor scales",
    "[unit][engine]") {
  // Weights-only FP8 as compressed-tensors wrote it (tools/golden/gen_quantized_checkpoint.py).
  const Json written = test::LoadJson(test::GoldenDir("framezip-tiny-video-fp8/model/config.json"));
  auto parse = [](const Json& j) { return ParseLlavaConfig(j.dump()); };
  auto accepted = parse(written);
  INFO((accepted.ok() ? "" : MessageOf(accepted.status())));
  REQUIRE(accepted.ok());
  CHECK(accepted->stored_quantization == StoredQuantization::kFp8PerChannel);
  const Json::json_pointer group("/quantization_config/config_groups/group_0");
  // llm-compressor's FP8_DYNAMIC scheme: activations declared dynamic FP8 per token.
  Json dynamic = written;
  dynamic[group]["input_activations"] = {{"num_bits", 8},
                                         {"type", "float"},
                                         {"symmetric", true},
                                         {"strategy", "token"},
                                         {"dynamic", true}};
  CHECK(parse(dynamic).ok());
  // One scale for the whole tensor.
  Json per_tensor = written;
  per_tensor[group]["weights"]["strategy"] = "tensor";
  CHECK(parse(per_tensor).ok());

  struct Change {
    const char* pointer;  // JSON pointer under group_0
    Json value;
    const char* named;
  };
  const Change changes[] = {
      {"/weights/type", "int", "weights.type is \"int\""},
      {"/weights/num_bits", 4, "weights.num_bits is 4"},  // NVFP4 and the like
      {"/weights/strategy", "block", "weights.strategy is \"block\""},
      {"/weights/dynamic", true, "weights.dynamic is true"},
      {"/format", "int-quantized", "group_0.format"},
      // llm-compressor's static FP8 scheme: a calibrated activation scale that would not be read.
      {"/input_activations",
       Json::object({{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}),
       "input_activations.strategy is \"tensor\""},
  };
  for (const Change& c : changes) {
    Json j = written;
    j[group][Json::json_pointer(c.pointer)] = c.value;
    const Status s = parse(j).status();
    CAPTURE(c.pointer, MessageOf(s));
    CHECK(s.code() == absl::StatusCode::kUnimplemented);
    CHECK_THAT(MessageOf(s), Catch::Contains(c.named));
  }
}

TEST_CASE("preprocessor config: OV values and CLIP defaults", "[unit][engine]") {
  auto p = LoadPreprocessorConfig(ModelDir("tiny-ov-qwen2-f32"));
  REQUIRE(p.ok());
  CHECK(p->image_processor_type == "LlavaOnevisionImageProcessor");
  CHECK(p->size_height == 32);
  CHECK(p->size_width == 32);
  CHECK(p->resample == 3);
  CHECK(p->rescale_factor == Approx(1.0 / 255));
  CHECK(p->image_mean == std::vector<double>{0.5, 0.5, 0.5});
  CHECK(p->image_std == std::vector<double>{0.5, 0.5, 0.5});
  CHECK(p->do_pad);
  CHECK(p->image_grid_pinpoints.size() == 9);

  auto clip = LoadPreprocessorConfig(ModelDir("tiny-llava-clip-llama-f32"));
  REQUIRE(clip.ok());
  CHECK(clip->size_shortest_edge == 32);
  CHECK(clip->do_center_crop);
  CHECK(clip->crop_height == 32);
  CHECK(clip->image_mean[0] == Approx(0.48145466));

  // transformers 5 layout: only processor_config.json.
  testing::TempDir dir;
  auto proc = ReadFileToString(ModelDir("tiny-ov-qwen2-f32") / "processor_config.json");
  REQUIRE(proc.ok());
  test::WriteFile(dir / "processor_config.json", *proc);
  auto nested = LoadPreprocessorConfig(dir.path());
  REQUIRE(nested.ok());
  CHECK(nested->size_height == 32);
  CHECK(nested->image_grid_pinpoints == p->image_grid_pinpoints);

  auto bad = ParsePreprocessorConfig(R"({"image_mean": [0.5, 0.5]})");
  CHECK_THAT(MessageOf(bad.status()), Catch::Contains("image_mean"));
}

}  // namespace
}  // namespace framezip::engine::model
