// `framezip chat --server ADDR [--video F]`: an interactive client of framezip.v1.VideoChat.
// Creates a session, uploads the video (in chunks), then reads questions from stdin, one a line,
// streams each answer to stdout and prints a one-line stats footer per turn. Works piped too:
//   printf 'What happens?\nAnd then?\n' | framezip chat --server 127.0.0.1:50051 --video clip.mp4
// With --json the last line of stdout is one JSON object with every turn's stats.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "framezip/v1/video_chat.grpc.pb.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/policy_flag.h"
#include "tools/framezip/subcommands.h"

namespace framezip::cli {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

std::string Bytes(uint64_t n) {
  if (n >= (1u << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(n) / 1048576.0);
  if (n >= (1u << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(n) / 1024.0);
  return fmt::format("{} B", n);
}

// "KV_TIER_DEVICE" -> "device".
std::string ShortName(const std::string& enum_name, size_t prefix) {
  std::string s = enum_name.size() > prefix ? enum_name.substr(prefix) : enum_name;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string KvSummary(const v1::TurnStats& s) {
  std::string out;
  for (const v1::KvBytes& kv : s.kv_bytes()) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{}/{} {}", ShortName(v1::KvTier_Name(kv.tier()), 8),
                       ShortName(v1::KvPrecision_Name(kv.precision()), 13), Bytes(kv.bytes()));
  }
  return out.empty() ? "none" : out;
}

// --raw-size and --raw-fps: the layout of a file of RGB24 frames (width 0: a container file).
struct RawLayout {
  uint32_t width = 0;
  uint32_t height = 0;
  double fps = 10;
};

class ChatSession {
 public:
  ChatSession(std::shared_ptr<grpc::Channel> channel, std::string token)
      : stub_(v1::VideoChat::NewStub(std::move(channel))), token_(std::move(token)) {}

  void Prepare(grpc::ClientContext& context, std::chrono::seconds timeout) const {
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  }

  grpc::Status Create(const std::string& policy) {
    v1::CreateSessionRequest request;
    if (!policy.empty()) {
      if (const Status parsed = ParsePolicyFlag(policy, *request.mutable_policy()); !parsed.ok()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, MessageOf(parsed));
      }
    }
    grpc::ClientContext context;
    Prepare(context, std::chrono::seconds(30));
    v1::Session session;
    grpc::Status status = stub_->CreateSession(&context, request, &session);
    session_id_ = session.session_id();
    return status;
  }

  // num_frames 0: the session's sampling (the model's default, 32 uniform frames). With `raw`
  // (width > 0) the file holds RGB24 frames of that size back to back (ffmpeg's rawvideo
  // output), uploaded as raw frames `raw.fps` apart.
  grpc::Status Upload(const std::string& path, uint32_t num_frames, const RawLayout& raw,
                      v1::Media* media) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "--video: cannot read " + path);
    const auto size = static_cast<uint64_t>(in.tellg());
    in.seekg(0);
    v1::RawFrames raw_frames;
    if (raw.width > 0) {
      const uint64_t frame_bytes = uint64_t{3} * raw.width * raw.height;
      if (size == 0 || size % frame_bytes != 0) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            fmt::format("--video {}: {} bytes is not a whole number of {}x{} "
                                        "RGB24 frames ({} bytes each; --raw-size)",
                                        path, size, raw.width, raw.height, frame_bytes));
      }
      raw_frames.set_width(raw.width);
      raw_frames.set_height(raw.height);
      raw_frames.set_stride_bytes(3 * raw.width);
      raw_frames.set_frame_count(static_cast<uint32_t>(size / frame_bytes));
      for (uint64_t f = 0; f < size / frame_bytes; ++f) {
        raw_frames.add_timestamps_us(static_cast<int64_t>(static_cast<double>(f) * 1e6 / raw.fps));
      }
    }
    grpc::ClientContext context;
    Prepare(context, std::chrono::seconds(600));
    auto writer = stub_->UploadMedia(&context, media);
    v1::UploadMediaRequest first;
    first.mutable_metadata()->set_session_id(session_id_);
    first.mutable_metadata()->set_name(path.substr(path.find_last_of('/') + 1));
    first.mutable_metadata()->set_declared_size_bytes(size);
    if (num_frames > 0) first.mutable_metadata()->mutable_frames()->set_num_frames(num_frames);
    if (raw.width > 0) {
      first.mutable_metadata()->set_mime_type("video/x-raw-rgb24");
      *first.mutable_metadata()->mutable_raw_frames() = raw_frames;
    }
    bool ok = writer->Write(first);
    std::string buffer(kChunkBytes, '\0');
    while (ok && in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const auto n = static_cast<size_t>(in.gcount());
      if (n == 0) break;
      v1::UploadMediaRequest chunk;
      chunk.set_chunk(buffer.substr(0, n));
      ok = writer->Write(chunk);
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // Streams one turn's answer to stdout; returns the final stats in `stats`.
  grpc::Status Ask(const std::string& text, int max_tokens, v1::TurnStats* stats,
                   std::string* answer) {
    v1::ChatRequest request;
    request.set_session_id(session_id_);
    request.set_text(text);
    if (max_tokens > 0)
      request.mutable_sampling()->set_max_tokens(static_cast<uint32_t>(max_tokens));
    grpc::ClientContext context;
    Prepare(context, std::chrono::seconds(3600));
    auto reader = stub_->Chat(&context, request);
    v1::ChatResponse response;
    while (reader->Read(&response)) {
      if (response.has_delta()) {
        std::fwrite(response.delta().text().data(), 1, response.delta().text().size(), stdout);
        std::fflush(stdout);
        *answer += response.delta().text();
      } else if (response.has_stats()) {
        *stats = response.stats();
      }
    }
    std::fputc('\n', stdout);
    return reader->Finish();
  }

  void Delete() {
    grpc::ClientContext context;
    Prepare(context, std::chrono::seconds(30));
    v1::DeleteSessionRequest request;
    request.set_session_id(session_id_);
    v1::DeleteSessionResponse response;
    stub_->DeleteSession(&context, request, &response);
  }

  const std::string& session_id() const { return session_id_; }

 private:
  std::unique_ptr<v1::VideoChat::Stub> stub_;
  std::string token_;
  std::string session_id_;
};

int Fail(const char* what, const grpc::Status& status) {
  std::fprintf(stderr, "framezip chat: %s: %s\n", what, status.error_message().c_str());
  return 1;
}

}  // namespace

int RunChat(const std::vector<std::string>& args) {
  std::string server = "127.0.0.1:50051";
  std::string video;
  std::string token;
  std::string policy;
  int max_tokens = 0;
  int frames = 0;
  bool json = false;
  bool keep = false;
  std::string raw_size;
  double raw_fps = 10;
  FlagSet flags("framezip chat",
                "Chats with a framezip server about a video: uploads --video, then asks each "
                "line of stdin as a question in one session, streaming the answers with a stats "
                "footer per turn.");
  flags.String("server", &server, "server address", "ADDR");
  flags.String("video", &video, "a video (or image) to upload before the first question", "FILE");
  flags.String("token", &token, "bearer token, when the server requires one", "TOKEN");
  flags.String("policy", &policy,
               "compression policy of the session: NAME[:KEY=VALUE,...], NAME one of none|zipvl|"
               "attentionpack|zipvl+attentionpack|dynamic_llava|fastv|kivi|kivi4, each KEY an "
               "option of docs/api.md, e.g. attentionpack:factors=int4 (default: the server's)",
               "POLICY");
  flags.Int("frames", &frames,
            "frames to sample uniformly from --video (0 = the server's default; the server's "
            "--max-frames caps it)");
  flags.String("raw-size", &raw_size,
               "--video holds RGB24 frames of this size back to back (ffmpeg -f rawvideo "
               "-pix_fmt rgb24): upload them as raw frames, decoded by no codec",
               "WxH");
  flags.Double("raw-fps", &raw_fps, "with --raw-size: frames per second of the raw frames");
  flags.Int("max-tokens", &max_tokens, "generated tokens per answer at most (0 = server default)");
  flags.Bool("json", &json, "print every turn's stats as one JSON object on the last line");
  flags.Bool("keep", &keep, "keep the session on the server at the end");
  if (auto code = ParseOrExit(flags, args)) return *code;
  if (frames < 0) {
    std::fprintf(stderr, "framezip chat: --frames must be 0 or more, got %d\n", frames);
    return 2;
  }

  RawLayout raw;
  if (!raw_size.empty()) {
    char x = 0;
    std::istringstream in(raw_size);
    if (!(in >> raw.width >> x >> raw.height) || x != 'x' || !in.eof() || raw.width == 0 ||
        raw.height == 0 || raw.width > 8192 || raw.height > 8192) {
      std::fprintf(stderr, "framezip chat: --raw-size must be WxH (e.g. 128x128), got '%s'\n",
                   raw_size.c_str());
      return 2;
    }
    if (!(raw_fps > 0)) {
      std::fprintf(stderr, "framezip chat: --raw-fps must be above 0, got %g\n", raw_fps);
      return 2;
    }
    raw.fps = raw_fps;
  }

  ChatSession chat(grpc::CreateChannel(server, grpc::InsecureChannelCredentials()), token);
  if (grpc::Status s = chat.Create(policy); !s.ok()) return Fail("creating a session", s);
  std::fprintf(stderr, "session %s on %s\n", chat.session_id().c_str(), server.c_str());
  if (!video.empty()) {
    v1::Media media;
    if (grpc::Status s = chat.Upload(video, static_cast<uint32_t>(frames), raw, &media); !s.ok())
      return Fail("uploading", s);
    std::fprintf(stderr, "uploaded %s: %s %ux%u, %.1f s, %d frames -> %u visual tokens\n",
                 media.name().c_str(), media.codec().c_str(), media.width(), media.height(),
                 media.duration_seconds(), media.frame_timestamps_size(), media.visual_tokens());
  }
  const bool interactive = isatty(fileno(stdin));
  nlohmann::json turns = nlohmann::json::array();
  double first_ttft = 0;
  std::string line;
  int turn = 0;
  int exit_code = 0;
  while (true) {
    if (interactive) std::fprintf(stderr, "you> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/quit" || line == "/exit") break;
    if (line.empty()) continue;
    ++turn;
    v1::TurnStats stats;
    std::string answer;
    grpc::Status s = chat.Ask(line, max_tokens, &stats, &answer);
    if (!s.ok()) {
      Fail("turn", s);
      exit_code = 1;
      continue;
    }
    const double ttft = stats.time_to_first_token_seconds();
    if (turn == 1) first_ttft = ttft;
    std::string footer = fmt::format(
        "[turn {} | ttft {:.3f} s{} | prompt {} tokens: {} cached, {} new | {} generated @ "
        "{:.1f} tok/s | KV {} | ratio {:.2f}]",
        turn, ttft, turn > 1 ? fmt::format(" (turn 1: {:.3f} s)", first_ttft) : "",
        stats.prompt_tokens(), stats.cached_tokens(), stats.prefilled_tokens(),
        stats.generated_tokens(), stats.decode_tokens_per_second(), KvSummary(stats),
        stats.compression_ratio());
    std::fprintf(stderr, "%s\n", footer.c_str());
    nlohmann::json kv = nlohmann::json::array();
    for (const v1::KvBytes& b : stats.kv_bytes()) {
      kv.push_back({{"tier", ShortName(v1::KvTier_Name(b.tier()), 8)},
                    {"precision", ShortName(v1::KvPrecision_Name(b.precision()), 13)},
                    {"bytes", b.bytes()}});
    }
    turns.push_back({{"question", line},
                     {"answer", answer},
                     {"ttft_s", ttft},
                     {"prompt_tokens", stats.prompt_tokens()},
                     {"cached_tokens", stats.cached_tokens()},
                     {"prefilled_tokens", stats.prefilled_tokens()},
                     {"generated_tokens", stats.generated_tokens()},
                     {"decode_tok_s", stats.decode_tokens_per_second()},
                     {"compression_ratio", stats.compression_ratio()},
                     {"kv_bytes", kv}});
  }
  if (!keep) chat.Delete();
  if (json) {
    std::printf(
        "%s\n",
        nlohmann::json({{"session_id", chat.session_id()}, {"turns", turns}}).dump().c_str());
  }
  return exit_code;
}

}  // namespace framezip::cli
