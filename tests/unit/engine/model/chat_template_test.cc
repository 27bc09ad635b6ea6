#include "engine/model/chat_template.h"

#include <catch2/catch.hpp>

#include "engine/model/tokenizer.h"
#include "tests/unit/engine/model/model_test_util.h"

namespace framezip::engine::model {
namespace {

using test::GoldenDir;
using test::LoadJson;
using test::ModelDir;
using test::WriteFile;

std::vector<ChatMessage> Messages(const Json& j) {
  std::vector<ChatMessage> out;
  for (const Json& m : j) {
    ChatMessage msg;
    msg.role = m.at("role").get<std::string>();
    for (const Json& c : m.at("content")) {
      const std::string type = c.at("type").get<std::string>();
      if (type == "text") msg.content.push_back(ChatContent::Text(c.at("text").get<std::string>()));
      if (type == "image") msg.content.push_back(ChatContent::Image());
      if (type == "video") msg.content.push_back(ChatContent::Video());
    }
    out.push_back(std::move(msg));
  }
  return out;
}

TEST_CASE("chat template golden: rendering identical to apply_chat_template",
          "[unit][engine][golden]") {
  for (const char* model : {"tiny-ov-qwen2-f32", "tiny-llava-clip-llama-f32"}) {
    INFO(model);
    auto tmpl = ChatTemplate::Load(ModelDir(model));
    REQUIRE(tmpl.ok());
    CHECK(tmpl->kind() == ChatTemplateKind::kLlavaOnevision);
    const Json golden = LoadJson(GoldenDir(model) / "chat.json");
    size_t n = 0;
    for (const Json& c : golden.at("cases")) {
      INFO(c.at("name").get<std::string>());
      const auto messages = Messages(c.at("messages"));
      auto rendered = tmpl->Render(messages, c.at("add_generation_prompt").get<bool>());
      REQUIRE(rendered.ok());
      CHECK(*rendered == c.at("rendered").get<std::string>());
      ++n;
    }
    CHECK(n == 5);
  }
}

TEST_CASE("chat template golden: placeholder counts equal the processor's",
          "[unit][engine][golden]") {
  const Json golden = LoadJson(GoldenDir("tiny-ov-qwen2-f32") / "chat.json");
  auto config = LoadLlavaConfig(ModelDir("tiny-ov-qwen2-f32"));
  REQUIRE(config.ok());
  auto pre = LoadPreprocessorConfig(ModelDir("tiny-ov-qwen2-f32"));
  REQUIRE(pre.ok());
  const VisualTokenLayout tiny = VisualTokenLayout::ForModel(*config, *pre);
  CHECK(tiny.tile_size == 32);
  CHECK(tiny.tokens_per_tile == 16);
  // The real llava-onevision-qwen2-0.5b-ov layout (class defaults).
  auto real_config = ParseLlavaConfig(R"({"model_type": "llava_onevision",
      "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
      "intermediate_size": 4304, "num_hidden_layers": 26, "num_attention_heads": 16,
      "image_size": 384, "patch_size": 14}})");
  REQUIRE(real_config.ok());
  auto real_pre =
      ParsePreprocessorConfig(R"({"image_processor_type": "LlavaOnevisionImageProcessor"})");
  REQUIRE(real_pre.ok());
  const VisualTokenLayout real = VisualTokenLayout::ForModel(*real_config, *real_pre);
  CHECK(real.tokens_per_tile == 729);
  size_t n = 0;
  for (const Json& c : golden.at("image_tokens")) {
    const bool is_real = c.at("layout").get<std::string>() == "real";
    const int64_t h = c.at("height").get<int64_t>(), w = c.at("width").get<int64_t>();
    INFO(c.at("layout").get<std::string>() << " " << h << "x" << w);
    CHECK(NumImageTokens(is_real ? real : tiny, h, w) == c.at("tokens").get<int64_t>());
    ++n;
  }
  CHECK(n >= 20);
  for (const Json& c : golden.at("video_tokens")) {
    const bool is_real = c.at("layout").get<std::string>() == "real";
    CHECK(NumVideoTokens(is_real ? real : tiny, c.at("frames").get<int64_t>()) ==
          c.at("tokens").get<int64_t>());
  }
  CHECK(NumImageTokens(real, 899, 1024, /*multi_image_sample=*/true) == 730);
}

TEST_CASE("chat template golden: the expanded prompt tokenizes to the processor's input_ids",
          "[unit][engine][golden]") {
  for (const char* model : {"tiny-ov-qwen2-f32", "tiny-llava-clip-llama-f32"}) {
    INFO(model);
    const Json fwd = LoadJson(GoldenDir(model) / "forward.json");
    auto config = LoadLlavaConfig(ModelDir(model));
    REQUIRE(config.ok());
    auto pre = LoadPreprocessorConfig(ModelDir(model));
    REQUIRE(pre.ok());
    auto tok = Tokenizer::FromFile(ModelDir(model) / "tokenizer.json");
    REQUIRE(tok.ok());
    auto tmpl = ChatTemplate::Load(ModelDir(model));
    REQUIRE(tmpl.ok());
    const bool ov = config->arch == LlavaArch::kLlavaOnevision;
    std::vector<ChatMessage> messages = {{"user", {ChatContent::Image()}}};
    if (ov) messages[0].content.push_back(ChatContent::Video());
    messages[0].content.push_back(ChatContent::Text("What happens here?"));
    auto prompt = tmpl->Render(messages, true);
    REQUIRE(prompt.ok());
    CHECK(*prompt == fwd.at("prompt").get<std::string>());
    const VisualTokenLayout layout = VisualTokenLayout::ForModel(*config, *pre);
    const std::vector<int64_t> images = {NumImageTokens(layout, 24, 40)};
    std::vector<int64_t> videos;
    if (ov) videos.push_back(NumVideoTokens(layout, 2));
    auto expanded = ExpandVisualPlaceholders(*prompt, images, videos);
    REQUIRE(expanded.ok());
    auto ids = (*tok)->Encode(*expanded, /*add_special_tokens=*/true);
    REQUIRE(ids.ok());
    CHECK(*ids == fwd.at("input_ids").get<std::vector<int32_t>>());
  }
}

TEST_CASE("chat template: ChatML variants, errors", "[unit][engine]") {
  const std::vector<ChatMessage> msgs = {{"user", {ChatContent::Text("Hi")}}};
  auto qwen = ChatTemplate::FromSource(KnownChatTemplateSource(ChatTemplateKind::kQwen2Instruct));
  REQUIRE(qwen.ok());
  CHECK(*qwen->Render(msgs, true) ==
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi"
        "<|im_end|>\n<|im_start|>assistant\n");
  auto chatml = ChatTemplate::OfKind(ChatTemplateKind::kChatML);
  CHECK(*chatml.Render(msgs, false) == "<|im_start|>user\nHi<|im_end|>\n");
  const std::vector<ChatMessage> with_image = {{"user", {ChatContent::Image()}}};
  CHECK(chatml.Render(with_image, true).status().code() == absl::StatusCode::kInvalidArgument);

  // Formatting differences outside string literals do not matter; text inside them does.
  const std::string reformatted =
      "{% for message in messages %}\n  {{ '<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n' }}\n{% endfor %}\n{% if add_generation_prompt "
      "%}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  auto r = ChatTemplate::FromSource(reformatted);
  REQUIRE(r.ok());
  CHECK(r->kind() == ChatTemplateKind::kChatML);
  // A literal newline inside a string literal reads as '\n' (transformers 5 writes
  // chat_template.jinja that way); a different character there is a different template.
  const std::string_view escaped = KnownChatTemplateSource(ChatTemplateKind::kLlavaOnevision);
  std::string literal_newlines;
  for (size_t i = 0; i < escaped.size(); ++i) {
    const bool escape = escaped[i] == '\\' && i + 1 < escaped.size() && escaped[i + 1] == 'n';
    literal_newlines.push_back(escape ? '\n' : escaped[i]);
    if (escape) ++i;
  }
  REQUIRE(literal_newlines.size() < escaped.size());
  auto ov = ChatTemplate::FromSource(literal_newlines);
  REQUIRE(ov.ok());
  CHECK(ov->kind() == ChatTemplateKind::kLlavaOnevision);
  std::string changed = literal_newlines;
  changed[changed.find("<video>\n") + 7] = ' ';
  CHECK(ChatTemplate::FromSource(changed).status().code() == absl::StatusCode::kUnimplemented);

  auto unknown =
      ChatTemplate::FromSource("{{ bos_token }}{% for m in messages %}[INST]{% endfor %}");
  CHECK(unknown.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(unknown.status()), Catch::Contains("[INST]"));

  testing::TempDir dir;
  WriteFile(dir / "tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "x"},
                {"name": "default", "template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"}]})");
  auto loaded = ChatTemplate::Load(dir.path());
  REQUIRE(loaded.ok());
  CHECK(loaded->kind() == ChatTemplateKind::kChatML);

  auto bad =
      ExpandVisualPlaceholders("<image><image>", std::vector<int64_t>{3}, std::vector<int64_t>{});
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  auto ok = ExpandVisualPlaceholders("a<image>b<video>", std::vector<int64_t>{2},
                                     std::vector<int64_t>{1});
  REQUIRE(ok.ok());
  CHECK(*ok == "a<image><image>b<video>");
}

}  // namespace
}  // namespace framezip::engine::model
