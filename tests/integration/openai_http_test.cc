// The OpenAI-compatible HTTP API (--openai-listen) against the real server (VideoChatServer on
// 127.0.0.1:0, real media workers) over the deterministic fake model (a TEST DOUBLE): answers
// equal to gRPC's Generate for the same conversation, streamed and not, text and video (data:
// URLs and framezip://media/ID), bearer principals, and hostile HTTP input (oversized, malformed,
// trickled, never-read and dropped requests), each checked for the right status, freed pages and
// a server that keeps serving.
#include <absl/strings/escaping.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/integration/http_test_client.h"
#include "tests/integration/server_test_util.h"
#include "tests/testing/temp_dir.h"

namespace framezip::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

server::ServerConfig OpenAiConfig() {
  server::ServerConfig config = TestConfig();
  config.openai_listen = "127.0.0.1:0";
  return config;
}

std::string ChatBody(const std::vector<json>& messages, json extra = json::object()) {
  extra["model"] = "fake-test-model";
  extra["messages"] = messages;
  return extra.dump();
}

// "scheme://rest", spelled so that no source line holds a double slash (CMake's Catch test parser
// strips everything after one as a comment).
std::string Url(const std::string& scheme, const std::string& rest) {
  return scheme + ":/" + "/" + rest;
}

json UserText(const std::string& text) { return {{"role", "user"}, {"content", text}}; }

// The text of a streamed answer, and whether it ended with [DONE].
std::string StreamedText(const std::string& body, bool* done, json* usage = nullptr) {
  std::string text;
  *done = false;
  for (const std::string& data : SseData(body)) {
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    const json chunk = json::parse(data);
    if (chunk.contains("usage") && usage != nullptr) *usage = chunk["usage"];
    for (const json& choice : chunk["choices"]) {
      if (choice["delta"].contains("content"))
        text += choice["delta"]["content"].get<std::string>();
    }
  }
  return text;
}

std::string GenerateAnswer(InProcessServer& server, const std::vector<std::string>& user_texts,
                           const v1::InlineMedia* media = nullptr) {
  v1::GenerateRequest request;
  if (media != nullptr) *request.add_media() = *media;
  for (size_t i = 0; i < user_texts.size(); ++i) {
    v1::Message* m = request.add_messages();
    m->set_role(v1::ROLE_USER);
    if (i == 0 && media != nullptr) m->add_content()->set_media_id(media->media_id());
    m->add_content()->set_text(user_texts[i]);
  }
  ChatClient client(server.Stub());
  TurnResult result = client.Generate(request);
  REQUIRE(result.status.ok());
  return result.text;
}

json ErrorOf(const HttpReply& reply) {
  json j = json::parse(reply.body, nullptr, false);
  REQUIRE(!j.is_discarded());
  REQUIRE(j.contains("error"));
  return j["error"];
}

TEST_CASE("chat completions answer as gRPC Generate does, streamed and not",
          "[integration][server][openai]") {
  InProcessServer server(OpenAiConfig());
  const int port = server.server().openai_port();
  REQUIRE(port > 0);
  const std::string expected = GenerateAnswer(server, {"What is in the video?"});

  HttpCall call;
  call.body = ChatBody({UserText("What is in the video?")});
  const HttpReply plain = Http(port, call);
  INFO(plain.body);
  REQUIRE(plain.status == 200);
  CHECK(plain.headers.count("x-framezip-request-id") == 1);
  const json answer = json::parse(plain.body);
  CHECK(answer["object"] == "chat.completion");
  CHECK(answer["choices"][0]["message"]["role"] == "assistant");
  CHECK(answer["choices"][0]["message"]["content"] == expected);
  CHECK(answer["choices"][0]["finish_reason"] == "stop");
  CHECK(answer["usage"]["prompt_tokens"].get<int>() > 0);
  CHECK(answer["usage"]["completion_tokens"].get<int>() > 0);
  CHECK(answer["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() == 0);

  call.body = ChatBody({UserText("What is in the video?")},
                       {{"stream", true}, {"stream_options", {{"include_usage", true}}}});
  const HttpReply streamed = Http(port, call);
  REQUIRE(streamed.status == 200);
  CHECK(streamed.headers.at("content-type") == "text/event-stream");
  bool done = false;
  json usage;
  CHECK(StreamedText(streamed.body, &done, &usage) == expected);
  CHECK(done);
  CHECK(usage["prompt_tokens"] == answer["usage"]["prompt_tokens"]);
  CHECK(usage["completion_tokens"] == answer["usage"]["completion_tokens"]);

  // A stop string and max_tokens take effect as they do over gRPC.
  call.body = ChatBody({UserText("What is in the video?")}, {{"max_tokens", 5}});
  const json cut = json::parse(Http(port, call).body);
  CHECK(cut["choices"][0]["message"]["content"] == expected.substr(0, 5));
  CHECK(cut["choices"][0]["finish_reason"] == "length");

  // GET /v1/models, /health, /ready.
  HttpCall get;
  get.method = "GET";
  get.target = "/v1/models";
  const HttpReply models = Http(port, get);
  REQUIRE(models.status == 200);
  CHECK(json::parse(models.body)["data"][0]["id"] == server.server().engine().model().name);
  get.target = "/health";
  CHECK(Http(port, get).status == 200);
  get.target = "/ready";
  CHECK(Http(port, get).status == 200);
  CHECK(server.fake().live_sequences() == 0);
}

TEST_CASE("a video through a data URL and through a stored media id answers as Generate",
          "[integration][server][openai]") {
  TempDir dir;
  InProcessServer server(OpenAiConfig());
  const int port = server.server().openai_port();
  const std::string clip = MakeTestClip(dir.path());
  v1::InlineMedia inline_media;
  inline_media.set_media_id("clip");
  inline_media.set_mime_type("video/mp4");
  inline_media.set_data(clip);
  const std::string expected = GenerateAnswer(server, {"Describe the clip."}, &inline_media);

  const std::string url = "data:video/mp4;base64," + absl::Base64Escape(clip);
  HttpCall call;
  call.body =
      ChatBody({{{"role", "user"},
                 {"content", json::array({{{"type", "video_url"}, {"video_url", {{"url", url}}}},
                                          {{"type", "text"}, {"text", "Describe the clip."}}})}}},
               {{"framezip", {{"policy", "none"}}}});
  const HttpReply reply = Http(port, call);
  REQUIRE(reply.status == 200);
  const json answer = json::parse(reply.body);
  CHECK(answer["choices"][0]["message"]["content"] == expected);
  // The visual tokens count in the prompt.
  call.body = ChatBody({UserText("Describe the clip.")});
  const json text_only = json::parse(Http(port, call).body);
  CHECK(answer["usage"]["prompt_tokens"].get<int>() >
        text_only["usage"]["prompt_tokens"].get<int>());

  // The same bytes uploaded with gRPC to a session of the same principal.
  ChatClient client(server.Stub());
  const std::string session = client.NewSession();
  v1::Media media;
  REQUIRE(client.Upload(session, clip, &media).ok());
  call.body = ChatBody(
      {{{"role", "user"},
        {"content",
         json::array({{{"type", "video_url"},
                       {"video_url", {{"url", Url("framezip", "media/" + media.media_id())}}}},
                      {{"type", "text"}, {"text", "Describe the clip."}}})}}},
      {{"stream", true}});
  const HttpReply stored = Http(port, call);
  REQUIRE(stored.status == 200);
  bool done = false;
  CHECK(StreamedText(stored.body, &done) == expected);
  CHECK(done);

  // Another media id is 404; the turn's directory of linked files is gone after it.
  call.body =
      ChatBody({{{"role", "user"},
                 {"content", json::array({{{"type", "image_url"},
                                           {"image_url", {{"url", Url("framezip", "media/nope")}}}},
                                          {{"type", "text"}, {"text", "hi"}}})}}});
  const HttpReply missing = Http(port, call);
  CHECK(missing.status == 404);
  CHECK(ErrorOf(missing)["type"] == "not_found_error");
  CHECK(WaitUntil([&] {
    return !std::filesystem::exists(server.server().media_dir() / "_generate") ||
           std::filesystem::is_empty(server.server().media_dir() / "_generate");
  }));
  CHECK(server.fake().live_sequences() == 0);
}

TEST_CASE("file URLs are read only from the directory the operator allowed",
          "[integration][server][openai]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "allowed");
  std::filesystem::create_directories(dir / "private");
  const std::string clip = MakeTestClip(dir.path());
  std::filesystem::copy_file(dir / "clip.mp4", dir / "allowed/clip.mp4");
  std::filesystem::copy_file(dir / "clip.mp4", dir / "private/clip.mp4");
  std::filesystem::create_symlink(dir / "private/clip.mp4", dir / "allowed/escape.mp4");
  server::ServerConfig config = OpenAiConfig();
  config.openai_local_media_dir = (dir / "allowed").string();
  InProcessServer server(config);
  const int port = server.server().openai_port();
  const auto ask = [&](const std::string& path) {
    HttpCall call;
    call.body = ChatBody(
        {{{"role", "user"},
          {"content",
           json::array({{{"type", "video_url"}, {"video_url", {{"url", Url("file", path)}}}},
                        {{"type", "text"}, {"text", "Describe it."}}})}}});
    return Http(port, call);
  };
  v1::InlineMedia inline_media;
  inline_media.set_media_id("clip");
  inline_media.set_data(clip);
  const HttpReply inside = ask((dir / "allowed/clip.mp4").string());
  REQUIRE(inside.status == 200);
  CHECK(json::parse(inside.body)["choices"][0]["message"]["content"] ==
        GenerateAnswer(server, {"Describe it."}, &inline_media));
  const HttpReply outside = ask((dir / "private/clip.mp4").string());
  CHECK(outside.status == 400);
  CHECK_THAT(ErrorOf(outside)["message"].get<std::string>(), Catch::Contains("outside"));
  const HttpReply escape = ask((dir / "allowed/escape.mp4").string());
  CHECK(escape.status == 400);
  const HttpReply dotdot = ask((dir / "allowed/../private/clip.mp4").string());
  CHECK(dotdot.status == 400);
  CHECK(ask((dir / "allowed/missing.mp4").string()).status == 404);
}

TEST_CASE("bearer tokens map to the gRPC principals and another principal gets 404 for media",
          "[integration][server][openai]") {
  TempDir dir;
  std::ofstream(dir / "tokens") << "alice secret-a\nbob secret-b\n";
  server::ServerConfig config = OpenAiConfig();
  config.auth_token_file = (dir / "tokens").string();
  InProcessServer server(config);
  const int port = server.server().openai_port();

  HttpCall call;
  call.body = ChatBody({UserText("hi")});
  const HttpReply anonymous = Http(port, call);
  CHECK(anonymous.status == 401);
  CHECK(ErrorOf(anonymous)["type"] == "authentication_error");
  call.headers = {{"Authorization", "Bearer wrong"}};
  CHECK(Http(port, call).status == 401);
  HttpCall models;
  models.method = "GET";
  models.target = "/v1/models";
  CHECK(Http(port, models).status == 401);
  HttpCall health = models;
  health.target = "/health";
  CHECK(Http(port, health).status == 200);  // probes stay open

  ChatClient alice(server.Stub(), "secret-a");
  const std::string session = alice.NewSession();
  v1::Media media;
  REQUIRE(alice.Upload(session, MakeTestClip(dir.path()), &media).ok());
  call.body = ChatBody(
      {{{"role", "user"},
        {"content",
         json::array({{{"type", "video_url"},
                       {"video_url", {{"url", Url("framezip", "media/" + media.media_id())}}}},
                      {{"type", "text"}, {"text", "hi"}}})}}});
  call.headers = {{"Authorization", "Bearer secret-a"}};
  CHECK(Http(port, call).status == 200);
  call.headers = {{"Authorization", "Bearer secret-b"}};
  CHECK(Http(port, call).status == 404);
}

// One request of a conversation resent in full: `history` then a new user message.
json AskConversation(int port, std::vector<json>& history, const json& user, bool stream,
                     const std::string& token = "") {
  history.push_back(user);
  HttpCall call;
  if (!token.empty()) call.headers = {{"Authorization", "Bearer " + token}};
  json extra = {{"stream", stream}};
  if (stream) extra["stream_options"] = {{"include_usage", true}};
  call.body = ChatBody(history, extra);
  const HttpReply reply = Http(port, call);
  INFO(reply.body);
  REQUIRE(reply.status == 200);
  json turn;
  if (stream) {
    bool done = false;
    json usage;
    turn["answer"] = StreamedText(reply.body, &done, &usage);
    turn["usage"] = usage;
    CHECK(done);
  } else {
    const json answer = json::parse(reply.body);
    turn["answer"] = answer["choices"][0]["message"]["content"];
    turn["usage"] = answer["usage"];
  }
  history.push_back({{"role", "assistant"}, {"content", turn["answer"]}});
  return turn;
}

json VideoQuestion(const std::string& clip, const std::string& question) {
  return {
      {"role", "user"},
      {"content",
       json::array({{{"type", "video_url"},
                     {"video_url", {{"url", "data:video/mp4;base64," + absl::Base64Escape(clip)}}}},
                    {{"type", "text"}, {"text", question}}})}};
}

TEST_CASE("a conversation resent in full reuses its KV and answers as a gRPC session",
          "[integration][server][openai]") {
  TempDir dir;
  InProcessServer server(OpenAiConfig());
  const int port = server.server().openai_port();
  const std::string clip = MakeTestClip(dir.path());
  // The fake answers by repeating the question: a long first question makes the history most of
  // each later prompt, as a video's visual tokens do with a real model.
  const std::vector<std::string> questions = {
      "What moves in this video, and where does it go from the start to the end of the clip?",
      "Which colour?", "And at the end?"};
  ChatClient grpc_client(server.Stub());
  const std::string session = grpc_client.NewSession();
  v1::Media media;
  REQUIRE(grpc_client.Upload(session, clip, &media).ok());
  std::vector<TurnResult> reference;
  for (const std::string& q : questions) reference.push_back(grpc_client.Ask(session, q));

  for (const bool stream : {false, true}) {
    INFO((stream ? "streamed" : "plain"));
    std::vector<json> history;
    for (size_t i = 0; i < questions.size(); ++i) {
      const json user = i == 0 ? VideoQuestion(clip, questions[i]) : UserText(questions[i]);
      const json turn = AskConversation(port, history, user, stream);
      CHECK(turn["answer"] == reference[i].text);
      const int prompt = turn["usage"]["prompt_tokens"].get<int>();
      const int cached = turn["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
      CHECK(prompt == static_cast<int>(reference[i].stats->prompt_tokens()));
      CHECK(cached == static_cast<int>(reference[i].stats->cached_tokens()));
      if (i == 0) {
        CHECK(cached == 0);
      } else {
        CHECK(cached >= prompt * 9 / 10);
      }
    }
  }

  // Edited history: the answer is still right, but nothing was reusable.
  std::vector<json> edited = {VideoQuestion(clip, questions[0]),
                              {{"role", "assistant"}, {"content", "Something else entirely."}}};
  const json turn = AskConversation(port, edited, UserText(questions[1]), false);
  CHECK(turn["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() == 0);
  CHECK(WaitUntil([&] { return server.fake().live_sequences() == 0; }));
}

TEST_CASE("a conversation is reusable only by the principal that held it",
          "[integration][server][openai]") {
  TempDir dir;
  std::ofstream(dir / "tokens") << "alice secret-a\nbob secret-b\n";
  server::ServerConfig config = OpenAiConfig();
  config.auth_token_file = (dir / "tokens").string();
  InProcessServer server(config);
  const int port = server.server().openai_port();
  std::vector<json> alice;
  AskConversation(port, alice, UserText("Hello there"), false, "secret-a");
  std::vector<json> bob = alice;  // the same conversation, word for word
  const json alice2 = AskConversation(port, alice, UserText("Go on"), false, "secret-a");
  const json bob2 = AskConversation(port, bob, UserText("Go on"), false, "secret-b");
  CHECK(alice2["answer"] == bob2["answer"]);
  CHECK(alice2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0);
  CHECK(bob2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() == 0);
}

TEST_CASE("kept conversations are capped and never crowd gRPC sessions out",
          "[integration][server][openai]") {
  server::ServerConfig config = OpenAiConfig();
  config.openai_max_conversations = 2;
  config.max_sessions = 3;
  InProcessServer server(config);
  const int port = server.server().openai_port();
  std::vector<json> first, second, third;
  AskConversation(port, first, UserText("The first conversation"), false);
  AskConversation(port, second, UserText("The second conversation"), false);
  AskConversation(port, third, UserText("The third conversation"), false);  // the first goes
  ChatClient client(server.Stub());
  client.NewSession();  // the third slot of --max-sessions is still gRPC's
  grpc::ClientContext context;
  v1::ListSessionsResponse sessions;
  REQUIRE(server.Stub()->ListSessions(&context, v1::ListSessionsRequest(), &sessions).ok());
  int conversations = 0;
  for (const auto& s : sessions.sessions()) {
    if (s.labels().count("origin") == 1) {
      ++conversations;
      CHECK(s.labels().at("origin") == "openai");
    }
  }
  CHECK(conversations == 2);
  // The evicted conversation is answered all the same, from nothing; a kept one is reused.
  const json again = AskConversation(port, first, UserText("Go on"), false);
  CHECK(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() == 0);
  std::vector<json> kept = third;
  const json reused = AskConversation(port, kept, UserText("Go on"), false);
  CHECK(reused["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0);
}

TEST_CASE("hostile HTTP requests get the right 4xx in OpenAI's error format",
          "[integration][server][openai]") {
  server::ServerConfig config = OpenAiConfig();
  config.openai_max_body_bytes = 64 * 1024;
  InProcessServer server(config);
  const int port = server.server().openai_port();
  const auto expect_400 = [&](const std::string& body, const std::string& needle) {
    HttpCall call;
    call.body = body;
    const HttpReply reply = Http(port, call);
    INFO(body.substr(0, 200) << " -> " << reply.status << " " << reply.body);
    CHECK(reply.status == 400);
    const json error = ErrorOf(reply);
    CHECK(error["type"] == "invalid_request_error");
    CHECK_THAT(error["message"].get<std::string>(), Catch::Contains(needle));
    // Client strings are quoted at most 64 bytes long.
    CHECK(error["message"].get<std::string>().size() < 400);
  };
  expect_400("{\"messages\": [", "not valid JSON");
  expect_400("[1, 2]", "JSON object");
  expect_400(ChatBody({{{"role", std::string(5000, 'x')}, {"content", "hi"}}}), "messages[0].role");
  expect_400(ChatBody({{{"role", "tool"}, {"content", "hi"}}}), "messages[0].role");
  expect_400(ChatBody({UserText("hi")}, {{"n", 1000000}}), "n: 1000000 is not supported");
  expect_400(ChatBody({UserText("hi")}, {{"max_tokens", 1e15}}), "max_tokens");
  expect_400(ChatBody({UserText("hi")}, {{"max_tokens", -1}}), "max_tokens");
  expect_400(ChatBody({UserText("hi")}, {{"max_completion_tokens", 1u << 31}}),
             "max_completion_tokens");
  expect_400(ChatBody({UserText("hi")}, {{"temperature", "hot"}}), "temperature");
  const auto media_part = [](const std::string& url) {
    return std::vector<json>(
        {{{"role", "user"},
          {"content", json::array({{{"type", "image_url"}, {"image_url", {{"url", url}}}},
                                   {{"type", "text"}, {"text", "hi"}}})}}});
  };
  expect_400(ChatBody(media_part("data:image/png;base64,@@not base64@@")), "not valid base64");
  expect_400(ChatBody(media_part(Url("http", "169.254.169.254/latest/meta-data"))),
             "scheme 'http' is refused");
  expect_400(ChatBody(media_part(Url("file", "/etc/passwd"))), "scheme 'file' is refused");
  expect_400(ChatBody(media_part("data:text/html;base64,PGh0bWw+")), "is not video");
  // Valid base64 that is no media: the media check names the part.
  expect_400(ChatBody(media_part("data:image/png;base64," + absl::Base64Escape("not a png"))),
             "media[0]");

  HttpCall wrong_type;
  wrong_type.body = ChatBody({UserText("hi")});
  wrong_type.content_type = "text/plain";
  CHECK(Http(port, wrong_type).status == 415);
  HttpCall wrong_path;
  wrong_path.target = "/v1/completions";
  wrong_path.body = "{}";
  CHECK(Http(port, wrong_path).status == 404);
  HttpCall wrong_method;
  wrong_method.method = "GET";
  CHECK(Http(port, wrong_method).status == 405);

  // A body over the limit: 413 from its Content-Length, before the body is sent at all.
  const int fd = ConnectRaw(port);
  REQUIRE(fd >= 0);
  REQUIRE(SendAll(fd,
                  "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n"));
  bool closed = false;
  const std::string answer = ReadUntilClose(fd, 5s, &closed);
  ::close(fd);
  CHECK_THAT(answer, Catch::StartsWith("HTTP/1.1 413"));
  CHECK_THAT(answer, Catch::Contains("over the limit"));
  CHECK(closed);
  // A chunked body that grows past the limit: 413 as soon as it does.
  HttpCall chunked;
  chunked.body = ChatBody({UserText(std::string(100 * 1024, 'a'))});
  chunked.headers = {{"Transfer-Encoding", "chunked"}};
  const int fd2 = ConnectRaw(port);
  REQUIRE(fd2 >= 0);
  std::string request =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i) request += "1000\r\n" + std::string(4096, ' ') + "\r\n";
  SendAll(fd2, request);
  CHECK_THAT(ReadUntilClose(fd2, 5s), Catch::StartsWith("HTTP/1.1 413"));
  ::close(fd2);

  // Unreadable HTTP: 400 and the connection closes.
  const int fd3 = ConnectRaw(port);
  REQUIRE(fd3 >= 0);
  SendAll(fd3, "NOT HTTP AT ALL\r\n\r\n");
  CHECK_THAT(ReadUntilClose(fd3, 5s), Catch::StartsWith("HTTP/1.1 400"));
  ::close(fd3);

  // The server still serves.
  HttpCall ok;
  ok.body = ChatBody({UserText("still there?")});
  CHECK(Http(port, ok).status == 200);
  CHECK(server.fake().live_sequences() == 0);
}

TEST_CASE("a full wait queue answers 429 in the OpenAI error format",
          "[integration][server][openai]") {
  server::SchedulerOptions scheduler;
  scheduler.max_running = 1;
  scheduler.max_waiting = 1;
  FakeModelOptions model;
  model.step_delay = 20ms;
  InProcessServer server(OpenAiConfig(), model, scheduler);
  const int port = server.server().openai_port();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0}, limited{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&] {
      HttpCall call;
      call.body = ChatBody({UserText("a long question")});
      const HttpReply reply = Http(port, call);
      if (reply.status == 200) ++ok;
      if (reply.status == 429 && ErrorOf(reply)["type"] == "rate_limit_error") ++limited;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok.load() >= 1);
  CHECK(limited.load() >= 1);
  CHECK(ok.load() + limited.load() == 6);
}

TEST_CASE("a trickled request is dropped at its deadline while others are served",
          "[integration][server][openai]") {
  server::ServerConfig config = OpenAiConfig();
  config.openai_request_timeout_seconds = 1;
  InProcessServer server(config);
  const int port = server.server().openai_port();
  const int fd = ConnectRaw(port);
  REQUIRE(fd >= 0);
  const std::string request =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 200\r\n\r\n{\"messages\":";
  const auto start = std::chrono::steady_clock::now();
  bool dropped = false;
  for (size_t i = 0; i < request.size(); ++i) {
    if (!SendAll(fd, request.substr(i, 1))) {
      dropped = true;
      break;
    }
    // Another client is served at full speed meanwhile.
    if (i == 10) {
      HttpCall call;
      call.body = ChatBody({UserText("quick")});
      const auto t0 = std::chrono::steady_clock::now();
      CHECK(Http(port, call).status == 200);
      CHECK(std::chrono::steady_clock::now() - t0 < 900ms);
    }
    char byte;
    if (::recv(fd, &byte, 1, MSG_DONTWAIT) == 0) {
      dropped = true;
      break;
    }
    std::this_thread::sleep_for(20ms);
    if (std::chrono::steady_clock::now() - start > 4s) break;
  }
  if (!dropped) {
    bool closed = false;
    ReadUntilClose(fd, 3s, &closed);
    dropped = closed;
  }
  ::close(fd);
  CHECK(dropped);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("a client that never reads its stream is dropped and its turn's pages freed",
          "[integration][server][openai]") {
  server::ServerConfig config = OpenAiConfig();
  config.openai_write_timeout_seconds = 1;
  FakeModelOptions model;
  model.context_tokens = 1 << 20;
  model.kv_capacity_bytes = uint64_t{1} << 30;
  model.bytes_per_token = 64;
  model.step_delay = 200us;  // the 100k-token answer would take over 20 s
  InProcessServer server(config, model);
  const int port = server.server().openai_port();
  constexpr int kSmallReceiveBuffer = 4096;
  const int fd = ConnectRaw(port, kSmallReceiveBuffer);
  REQUIRE(fd >= 0);
  // A long answer (the fake repeats the question): 100k events, far more than the sockets'
  // buffers hold.
  const std::string body =
      ChatBody({UserText(std::string(100000, 'q'))}, {{"stream", true}, {"max_tokens", 200000}});
  REQUIRE(SendAll(fd,
                  "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  "Content-Type: application/json\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body));
  // The turn starts, fills the socket's buffers, then the write stalls past its timeout.
  CHECK(WaitUntil([&] { return server.fake().live_sequences() == 1; }, 10s));
  const auto start = std::chrono::steady_clock::now();
  CHECK(WaitUntil([&] { return server.fake().live_sequences() == 0; }, 30s));
  CHECK(std::chrono::steady_clock::now() - start < 15s);
  CHECK(WaitUntil([&] { return server.fake().KvUsedBytes() == 0; }, 10s));
  // It ended because the server cancelled it, not because the answer was done.
  CHECK(WaitUntil([&] {
    return HttpGet(server.server().metrics_port(), "/metrics")
               .find(
                   "code=\"CANCELLED\",model_name=\"fake-test-model\",protocol=\"http\",rpc="
                   "\"ChatCompletions\"") != std::string::npos;
  }));
  ::close(fd);
  HttpCall call;
  call.body = ChatBody({UserText("next")});
  CHECK(Http(port, call).status == 200);
}

TEST_CASE("256 concurrent streams, a quarter dropped mid-answer: the rest complete",
          "[integration][server][openai]") {
  server::SchedulerOptions scheduler;
  scheduler.max_running = 64;
  scheduler.max_waiting = 512;
  FakeModelOptions model;
  model.step_delay = 1ms;
  InProcessServer server(OpenAiConfig(), model, scheduler);
  const int port = server.server().openai_port();
  const std::string expected = GenerateAnswer(server, {"stream number"});
  constexpr int kStreams = 256;
  std::atomic<int> complete{0}, dropped{0}, wrong{0};
  std::atomic<int64_t> slowest_ms{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      HttpCall call;
      call.body = ChatBody({UserText("stream number")}, {{"stream", true}});
      const bool drop = i % 4 == 0;
      int chunks = 0;
      const auto t0 = std::chrono::steady_clock::now();
      const HttpReply reply =
          Http(port, call, [&](const std::string&) { return !(drop && ++chunks == 2); });
      const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
      int64_t prev = slowest_ms.load();
      while (ms > prev && !slowest_ms.compare_exchange_weak(prev, ms)) {
      }
      if (reply.dropped) {
        ++dropped;
        return;
      }
      bool done = false;
      if (reply.status == 200 && StreamedText(reply.body, &done) == expected && done) {
        ++complete;
      } else {
        ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong.load() == 0);
  CHECK(dropped.load() > 0);
  CHECK(dropped.load() + complete.load() == kStreams);
  CHECK(complete.load() >= kStreams * 3 / 4 - 8);  // a dropper may finish before its 2nd chunk
  CHECK(slowest_ms.load() < 60000);
  // The dropped streams' turns were cancelled and their pages freed: what stays is the KV of
  // the one conversation they all were, kept for its next turn. The server serves on.
  CHECK(WaitUntil([&] { return server.fake().live_sequences() == 0; }, 20s));
  grpc::ClientContext context;
  v1::ListSessionsRequest list;
  v1::ListSessionsResponse sessions;
  REQUIRE(server.Stub()->ListSessions(&context, list, &sessions).ok());
  REQUIRE(sessions.sessions_size() == 1);
  CHECK_THAT(sessions.sessions(0).session_id(), Catch::StartsWith("conv-"));
  // The conversation's session holds the KV of whichever of the identical requests ran as its
  // turn; when that one was a dropped stream its turn was cancelled and it holds none. Either
  // way the server's KV is exactly what the session holds: nothing of the cancelled turns stays.
  uint64_t kept = 0;
  for (const auto& kv : sessions.sessions(0).kv_bytes()) kept += kv.bytes();
  CHECK(WaitUntil([&] { return server.fake().KvUsedBytes() == kept; }, 10s));
  HttpCall health;
  health.method = "GET";
  health.target = "/ready";
  CHECK(Http(port, health).status == 200);
}

}  // namespace
}  // namespace framezip::testing
