#include "tests/integration/server_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <thread>

#include "server/batch_scheduler.h"
#include "server/media_backend_factory.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/child_process.h"

namespace framezip::testing {

server::ServerConfig TestConfig() {
  server::ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  config.housekeeping_ms = 50;
  config.media_worker = (BinaryDir() / "bin/framezip-media-worker").string();
  config.grace_seconds = 5;
  return config;
}

InProcessServer::InProcessServer(server::ServerConfig config, FakeModelOptions model,
                                 server::SchedulerOptions scheduler) {
  auto backend = std::make_unique<FakeModelBackend>(model);
  fake_ = backend.get();
  auto engine = std::make_unique<server::BatchScheduler>(std::move(backend), scheduler);
  auto media = server::CreateMediaBackend(config);
  if (!media.ok()) FAIL("media workers did not start: " << media.status().message());
  auto started = server::VideoChatServer::Start(config, std::move(engine), *media);
  if (!started.ok()) FAIL("server did not start: " << started.status().message());
  server_ = std::move(*started);
}

InProcessServer::~InProcessServer() = default;

std::unique_ptr<v1::VideoChat::Stub> InProcessServer::Stub() const {
  return v1::VideoChat::NewStub(grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
}

void ChatClient::Prepare(grpc::ClientContext& context) const {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
}

grpc::Status ChatClient::CreateSession(const v1::CreateSessionRequest& request,
                                       v1::Session* session) {
  grpc::ClientContext context;
  Prepare(context);
  return stub_->CreateSession(&context, request, session);
}

std::string ChatClient::NewSession(const std::string& system_prompt) {
  v1::CreateSessionRequest request;
  request.set_system_prompt(system_prompt);
  v1::Session session;
  const grpc::Status status = CreateSession(request, &session);
  REQUIRE(status.error_message() == "");
  REQUIRE(status.ok());
  return session.session_id();
}

grpc::Status ChatClient::GetSession(const std::string& id, v1::Session* session) {
  grpc::ClientContext context;
  Prepare(context);
  v1::GetSessionRequest request;
  request.set_session_id(id);
  return stub_->GetSession(&context, request, session);
}

grpc::Status ChatClient::DeleteSession(const std::string& id,
                                       v1::DeleteSessionResponse* response) {
  grpc::ClientContext context;
  Prepare(context);
  v1::DeleteSessionRequest request;
  request.set_session_id(id);
  return stub_->DeleteSession(&context, request, response);
}

grpc::Status ChatClient::Upload(const std::string& session_id, const std::string& bytes,
                                v1::Media* media, std::optional<uint64_t> declared,
                                size_t chunk_bytes, const std::string& mime) {
  grpc::ClientContext context;
  Prepare(context);
  auto writer = stub_->UploadMedia(&context, media);
  v1::UploadMediaRequest first;
  first.mutable_metadata()->set_session_id(session_id);
  first.mutable_metadata()->set_name("clip.mp4");
  first.mutable_metadata()->set_mime_type(mime);
  first.mutable_metadata()->set_declared_size_bytes(declared ? *declared : bytes.size());
  bool ok = writer->Write(first);
  for (size_t off = 0; ok && off < bytes.size(); off += chunk_bytes) {
    v1::UploadMediaRequest chunk;
    chunk.set_chunk(bytes.substr(off, chunk_bytes));
    ok = writer->Write(chunk);
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status ChatClient::UploadRaw(const std::string& session_id, const v1::RawFrames& raw,
                                   const std::string& pixels, v1::Media* media,
                                   std::optional<uint64_t> declared, size_t chunk_bytes) {
  grpc::ClientContext context;
  Prepare(context);
  auto writer = stub_->UploadMedia(&context, media);
  v1::UploadMediaRequest first;
  first.mutable_metadata()->set_session_id(session_id);
  first.mutable_metadata()->set_name("frames");
  *first.mutable_metadata()->mutable_raw_frames() = raw;
  first.mutable_metadata()->set_declared_size_bytes(declared ? *declared : pixels.size());
  bool ok = writer->Write(first);
  for (size_t off = 0; ok && off < pixels.size(); off += chunk_bytes) {
    v1::UploadMediaRequest chunk;
    chunk.set_chunk(pixels.substr(off, chunk_bytes));
    ok = writer->Write(chunk);
  }
  writer->WritesDone();
  return writer->Finish();
}

TurnResult ChatClient::Chat(const v1::ChatRequest& request,
                            std::function<void(grpc::ClientContext&, int)> on_delta,
                            std::optional<std::chrono::milliseconds> timeout) {
  grpc::ClientContext context;
  Prepare(context);
  if (timeout) context.set_deadline(std::chrono::system_clock::now() + *timeout);
  TurnResult result;
  auto reader = stub_->Chat(&context, request);
  v1::ChatResponse response;
  while (reader->Read(&response)) {
    if (result.stats) ++result.messages_after_stats;
    if (response.has_delta()) {
      result.text += response.delta().text();
      if (on_delta) on_delta(context, result.deltas);
      ++result.deltas;
    } else if (response.has_stats()) {
      result.stats = response.stats();
    }
  }
  result.status = reader->Finish();
  return result;
}

TurnResult ChatClient::Ask(const std::string& session_id, const std::string& text) {
  v1::ChatRequest request;
  request.set_session_id(session_id);
  request.set_text(text);
  return Chat(request);
}

TurnResult ChatClient::Generate(const v1::GenerateRequest& request) {
  grpc::ClientContext context;
  Prepare(context);
  TurnResult result;
  auto reader = stub_->Generate(&context, request);
  v1::ChatResponse response;
  while (reader->Read(&response)) {
    if (response.has_delta()) {
      result.text += response.delta().text();
      ++result.deltas;
    } else if (response.has_stats()) {
      result.stats = response.stats();
    }
  }
  result.status = reader->Finish();
  return result;
}

std::string MakeTestClip(const std::filesystem::path& dir, double seconds) {
  const auto path = dir / "clip.mp4";
  const int code = RunCommand({"ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f",
                               "lavfi", "-i",
                               "testsrc=size=64x48:rate=10:duration=" + std::to_string(seconds),
                               "-pix_fmt", "yuv420p", "-c:v", "libx264", path.string()},
                              dir / "ffmpeg.log");
  REQUIRE(code == 0);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

bool WaitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[8192];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) body.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t split = body.find("\r\n\r\n");
  return split == std::string::npos ? "" : body.substr(split + 4);
}

}  // namespace framezip::testing
