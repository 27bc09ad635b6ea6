// The OpenAI protocol's translation (server/openai_protocol.h) on its own: request bodies to
// framezip.v1.GenerateRequest, refusals naming the field, and the answer objects' shapes. The
// server around it is tested in tests/integration/openai_http_test.cc.
#include "server/openai_protocol.h"

#include <absl/strings/escaping.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>

#include "tests/testing/random.h"

namespace framezip::server {
namespace {

using nlohmann::json;

// Spelled without a double slash in one literal: CMake's Catch test parser strips everything
// after one as a comment.
const std::string kLocalUrl = std::string("file:/") + "/" + "/srv/a.mp4";
const std::string kHostUrl = std::string("file:/") + "/host/etc/passwd";

TEST_CASE("a chat completions body becomes a GenerateRequest", "[unit][server]") {
  // Fresh random bytes each run: the data: URL's base64 must come back byte for byte.
  std::mt19937_64 rng(testing::TestSeed());
  std::string bytes(1000 + rng() % 5000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  const json body = {
      {"model", "m"},
      {"messages",
       json::array(
           {{{"role", "developer"}, {"content", "Be brief."}},
            {{"role", "user"},
             {"content",
              json::array(
                  {{{"type", "video_url"},
                    {"video_url", {{"url", "data:video/mp4;base64," + absl::Base64Escape(bytes)}}}},
                   {{"type", "image_url"},
                    {"image_url",
                     {{"url",
                       "framezip:/"
                       "/media/media-1-ab"}}}},
                   {{"type", "text"}, {"text", "What moves?"}}})}},
            {{"role", "assistant"}, {"content", "A ball."}},
            {{"role", "user"}, {"content", "Then?"}}})},
      {"temperature", 0.5},
      {"top_p", 0.9},
      {"top_k", 40},
      {"seed", 7},
      {"max_completion_tokens", 33},
      {"stop", "END"},
      {"n", 1},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"framezip",
       {{"policy", {{"kind", "POLICY_KIND_KIVI"}, {"kivi", {{"bits", 4}}}}},
        {"frames", {{"num_frames", 8}}},
        {"ignore_eos", true}}}};
  StatusOr<OpenAiChatRequest> parsed = ParseChatCompletionRequest(body.dump());
  REQUIRE(parsed.ok());
  const v1::GenerateRequest& g = parsed->generate;
  CHECK(g.model() == "m");
  REQUIRE(g.messages_size() == 4);
  CHECK(g.messages(0).role() == v1::ROLE_SYSTEM);
  CHECK(g.messages(2).role() == v1::ROLE_ASSISTANT);
  REQUIRE(g.messages(1).content_size() == 3);
  REQUIRE(g.media_size() == 1);
  CHECK(g.media(0).data() == bytes);
  CHECK(g.media(0).mime_type() == "video/mp4");
  CHECK(g.messages(1).content(0).media_id() == g.media(0).media_id());
  CHECK(g.messages(1).content(1).media_id() == "media-1-ab");
  CHECK(parsed->stored_media_ids == std::vector<std::string>{"media-1-ab"});
  CHECK(g.sampling().temperature() == Approx(0.5));
  CHECK(g.sampling().top_p() == Approx(0.9));
  CHECK(g.sampling().top_k() == 40);
  CHECK(g.sampling().seed() == 7);
  CHECK(g.sampling().max_tokens() == 33);
  CHECK(g.sampling().stop_size() == 1);
  CHECK(g.sampling().ignore_eos());
  CHECK(g.policy().kind() == v1::POLICY_KIND_KIVI);
  CHECK(g.policy().kivi().bits() == 4);
  CHECK(g.frames().num_frames() == 8);
  CHECK(parsed->stream);
  CHECK(parsed->include_usage);

  // A local file: parsed, its bytes left to the transport (which may refuse it).
  StatusOr<OpenAiChatRequest> local = ParseChatCompletionRequest(
      json({{"messages",
             json::array({{{"role", "user"},
                           {"content", json::array({{{"type", "video_url"},
                                                     {"video_url", {{"url", kLocalUrl}}}}})}}})}})
          .dump());
  REQUIRE(local.ok());
  REQUIRE(local->local_media.size() == 1);
  CHECK(local->local_media[0].path == "/srv/a.mp4");
  CHECK(local->local_media[0].field == "messages[0].content[0].video_url.url");
  CHECK(local->generate.media(local->local_media[0].index).data().empty());

  // A policy by name.
  StatusOr<OpenAiChatRequest> named = ParseChatCompletionRequest(
      json({{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
            {"framezip", {{"policy", "zipvl"}}}})
          .dump());
  REQUIRE(named.ok());
  CHECK(named->generate.policy().kind() == v1::POLICY_KIND_ZIPVL);
  // ... or with options, as the CLI's --policy writes them.
  StatusOr<OpenAiChatRequest> with_options = ParseChatCompletionRequest(
      json({{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
            {"framezip", {{"policy", "attentionpack:factors=int4,rank_v=8"}}}})
          .dump());
  REQUIRE(with_options.ok());
  CHECK(with_options->generate.policy().kind() == v1::POLICY_KIND_ATTENTIONPACK);
  CHECK(with_options->generate.policy().attentionpack().factors() == v1::FACTORS_INT4);
  CHECK(with_options->generate.policy().attentionpack().rank_v() == 8);
}

TEST_CASE("bad chat completions bodies are refused naming the field", "[unit][server]") {
  const auto refused = [](const std::string& body, const std::string& needle) {
    StatusOr<OpenAiChatRequest> parsed = ParseChatCompletionRequest(body);
    INFO(body.substr(0, 200));
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(MessageOf(parsed.status()), Catch::Contains(needle));
    CHECK(MessageOf(parsed.status()).size() < 400);
  };
  const auto with = [](json extra) {
    extra["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
    return extra.dump();
  };
  refused("", "not valid JSON");
  refused("{\"messages\": 3}", "messages");
  refused(json({{"messages", json::array({{{"role", "tool"}, {"content", "x"}}})}}).dump(),
          "messages[0].role");
  refused(json({{"messages", json::array({{{"role", "user"}}})}}).dump(), "messages[0].content");
  refused(
      json({{"messages",
             json::array({{{"role", "user"}, {"content", json::array({{{"type", "audio"}}})}}})}})
          .dump(),
      "messages[0].content[0].type");
  refused(with({{"n", 2}}), "n: 2 is not supported");
  refused(with({{"max_tokens", 0}}), "max_tokens: must be >= 1");
  refused(with({{"max_tokens", 1e300}}), "max_tokens");
  refused(with({{"max_tokens", 2.5}}), "max_tokens: must be an integer");
  refused(with({{"temperature", 3}}), "temperature");
  refused(with({{"top_p", 0}}), "top_p");
  refused(with({{"presence_penalty", 0.5}}), "presence_penalty");
  refused(with({{"stop", 5}}), "stop");
  refused(with({{"stream", "yes"}}), "stream");
  refused(with({{"framezip", {{"policy", "fast"}}}}), "framezip.policy");
  refused(with({{"framezip", {{"frames", {{"num_frames", "many"}}}}}}), "framezip.frames");
  const auto media = [](const std::string& url) {
    return json({{"messages",
                  json::array({{{"role", "user"},
                                {"content", json::array({{{"type", "image_url"},
                                                          {"image_url", {{"url", url}}}}})}}})}})
        .dump();
  };
  refused(media("https:/"
                "/example.com/a.png"),
          "scheme 'https' is refused");
  refused(media("data:image/png,abc"), "base64");
  refused(media("file:relative.png"), "scheme 'file' is refused");
  refused(media(kHostUrl), "is not file:");
  refused(media("data:image/png;base64,***"), "not valid base64");
  refused(media("data:application/pdf;base64,AAAA"), "is not video");
  refused(media("framezip:/"
                "/media/../../etc"),
          "does not name a media id");
}

TEST_CASE("answers and errors have OpenAI's shapes", "[unit][server]") {
  TurnStats stats;
  stats.prompt_tokens = 100;
  stats.cached_tokens = 90;
  stats.generated_tokens = 7;
  stats.finish_reason = FinishReason::kLength;
  const json plain = json::parse(ChatCompletionJson("id1", 5, "m", "text", stats));
  CHECK(plain["choices"][0]["message"]["content"] == "text");
  CHECK(plain["choices"][0]["finish_reason"] == "length");
  CHECK(plain["usage"]["total_tokens"] == 107);
  CHECK(plain["usage"]["prompt_tokens_details"]["cached_tokens"] == 90);
  const std::string text = "a\"b\n";
  const std::string event = ChatChunkEvent("id1", 5, "m", &text, true, nullptr);
  REQUIRE(event.rfind("data: ", 0) == 0);
  REQUIRE(event.size() > 8);
  CHECK(event.substr(event.size() - 2) == "\n\n");
  const json chunk = json::parse(event.substr(6));
  CHECK(chunk["choices"][0]["delta"]["content"] == text);
  CHECK(chunk["choices"][0]["delta"]["role"] == "assistant");
  CHECK(chunk["choices"][0]["finish_reason"].is_null());
  const json usage = json::parse(ChatUsageEvent("id1", 5, "m", stats).substr(6));
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["completion_tokens"] == 7);

  CHECK(HttpStatusOf(InvalidArgumentError("x")) == 400);
  CHECK(HttpStatusOf(UnauthenticatedError("x")) == 401);
  CHECK(HttpStatusOf(NotFoundError("x")) == 404);
  CHECK(HttpStatusOf(ResourceExhaustedError("x")) == 429);
  CHECK(HttpStatusOf(UnavailableError("x")) == 503);
  const json error = json::parse(OpenAiErrorJson(ResourceExhaustedError("queue full")));
  CHECK(error["error"]["message"] == "queue full");
  CHECK(error["error"]["type"] == "rate_limit_error");
  CHECK(error["error"]["code"] == "RESOURCE_EXHAUSTED");
}

}  // namespace
}  // namespace framezip::server
