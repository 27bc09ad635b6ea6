// Helpers for the server's integration tests: an in-process VideoChatServer on 127.0.0.1:0 over
// the deterministic FakeModelBackend (TEST DOUBLE), a client with the calls the tests make, test
// clips made by ffmpeg, and condition waits (no fixed sleeps).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framezip/v1/video_chat.grpc.pb.h"
#include "server/batch_scheduler.h"
#include "server/config.h"
#include "server/video_chat_server.h"
#include "tests/integration/server_fake_model_backend.h"

namespace framezip::testing {

// A real VideoChatServer (the code framezip-server runs) over a FakeModelBackend.
class InProcessServer {
 public:
  explicit InProcessServer(server::ServerConfig config = {}, FakeModelOptions model = {},
                           server::SchedulerOptions scheduler = {});
  ~InProcessServer();

  std::string address() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  server::VideoChatServer& server() { return *server_; }
  FakeModelBackend& fake() { return *fake_; }
  std::unique_ptr<v1::VideoChat::Stub> Stub() const;

 private:
  FakeModelBackend* fake_ = nullptr;  // owned by the server's engine
  std::unique_ptr<server::VideoChatServer> server_;
};

// A server config for tests: loopback, port 0, metrics on port 0, quick housekeeping.
server::ServerConfig TestConfig();

struct TurnResult {
  grpc::Status status;
  std::string text;
  int deltas = 0;
  std::optional<v1::TurnStats> stats;
  int messages_after_stats = 0;
};

// Thin blocking client of framezip.v1.VideoChat.
class ChatClient {
 public:
  explicit ChatClient(std::unique_ptr<v1::VideoChat::Stub> stub, std::string token = "")
      : stub_(std::move(stub)), token_(std::move(token)) {}

  grpc::Status CreateSession(const v1::CreateSessionRequest& request, v1::Session* session);
  std::string NewSession(const std::string& system_prompt = "");  // REQUIREs success
  grpc::Status GetSession(const std::string& id, v1::Session* session);
  grpc::Status DeleteSession(const std::string& id, v1::DeleteSessionResponse* response);
  // Uploads `bytes` in chunks of `chunk_bytes`, declaring `declared` (default: the real size).
  grpc::Status Upload(const std::string& session_id, const std::string& bytes, v1::Media* media,
                      std::optional<uint64_t> declared = std::nullopt,
                      size_t chunk_bytes = 64 * 1024, const std::string& mime = "video/mp4");
  // Uploads decoded frames: metadata.raw_frames = `raw`, declared size = pixels' size (or
  // `declared`), the pixels in chunks of `chunk_bytes`.
  grpc::Status UploadRaw(const std::string& session_id, const v1::RawFrames& raw,
                         const std::string& pixels, v1::Media* media,
                         std::optional<uint64_t> declared = std::nullopt,
                         size_t chunk_bytes = 64 * 1024);
  // Runs a Chat to the end. `on_delta` (optional) sees each delta and may cancel `context`.
  TurnResult Chat(const v1::ChatRequest& request,
                  std::function<void(grpc::ClientContext&, int delta_index)> on_delta = {},
                  std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  TurnResult Ask(const std::string& session_id, const std::string& text);
  TurnResult Generate(const v1::GenerateRequest& request);

 private:
  void Prepare(grpc::ClientContext& context) const;
  std::unique_ptr<v1::VideoChat::Stub> stub_;
  std::string token_;
};

// A small H.264 MP4 made by ffmpeg (64x48, 10 fps); REQUIREs ffmpeg.
std::string MakeTestClip(const std::filesystem::path& dir, double seconds = 2.0);

// Polls `condition` until it holds or `timeout` passes; returns whether it held.
bool WaitUntil(const std::function<bool()>& condition,
               std::chrono::milliseconds timeout = std::chrono::seconds(10));

// GET http://127.0.0.1:<port><path>; returns the body ("" on failure).
std::string HttpGet(int port, const std::string& path);

}  // namespace framezip::testing
