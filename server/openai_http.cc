#include "server/openai_http.h"

// Asio's awaitable.hpp uses std::exchange without including <utility> (Boost 1.74).
#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "common/client_text.h"
#include "common/logging.h"
#include "server/conversation_reuse.h"
#include "server/openai_protocol.h"
#include "server/stateless_turn.h"

namespace framezip::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr uint32_t kHeaderLimit = 64 * 1024;
constexpr char kRpc[] = "ChatCompletions";
constexpr char kProtocol[] = "http";  // the metrics' protocol label

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<std::string> HeaderValue(const http::request_header<>& h, beast::string_view name) {
  auto it = h.find(name);
  if (it == h.end()) return std::nullopt;
  return std::string(it->value());
}

// What Stop needs of a connection.
class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  virtual void ForceClose() = 0;  // I/O thread
};

// Reads the file:///PATH media of `request` from under `root`: INVALID_ARGUMENT when no root is
// allowed or the path (symlinks resolved) leaves it, NOT_FOUND when it is no file there,
// RESOURCE_EXHAUSTED over `max_bytes`.
Status LoadLocalMedia(const std::string& root, uint64_t max_bytes, OpenAiChatRequest& request) {
  for (const OpenAiChatRequest::LocalMedia& local : request.local_media) {
    if (root.empty()) {
      return InvalidArgumentError(
          "{}: the scheme 'file' is refused (the server fetches nothing, and its operator "
          "allowed no local directory): send the bytes as a data:<type>;base64, URL or upload "
          "them and name them framezip://media/ID",
          local.field);
    }
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::canonical(root, ec);
    const std::filesystem::path file =
        ec ? std::filesystem::path() : std::filesystem::canonical(local.path, ec);
    if (ec || !std::filesystem::is_regular_file(file, ec)) {
      return NotFoundError("{}: no media file '{}' in the allowed directory", local.field,
                           ClientText(local.path));
    }
    const auto [end, rest] = std::mismatch(base.begin(), base.end(), file.begin(), file.end());
    if (end != base.end()) {
      return InvalidArgumentError("{}: '{}' is outside the directory the server may read",
                                  local.field, ClientText(local.path));
    }
    const uint64_t size = std::filesystem::file_size(file, ec);
    if (ec || size > max_bytes) {
      return ResourceExhaustedError("{}: the file is {} bytes, over the limit of {}", local.field,
                                    size, max_bytes);
    }
    std::ifstream in(file, std::ios::binary);
    std::string* data = request.generate.mutable_media(local.index)->mutable_data();
    data->resize(size);
    in.read(data->data(), static_cast<std::streamsize>(size));
    if (!in) {
      return NotFoundError("{}: '{}' could not be read", local.field, ClientText(local.path));
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct OpenAiHttpServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(ServiceCore* c, OpenAiHttpOptions o) : core(c), options(o), acceptor(ioc) {}

  ServiceCore* const core;
  const OpenAiHttpOptions options;
  net::io_context ioc{1};
  tcp::acceptor acceptor;
  std::thread thread;
  std::atomic<int> connections{0};
  bool stopping = false;                            // I/O thread only
  std::vector<std::weak_ptr<ConnectionBase>> open;  // I/O thread only

  // Turns the engine runs for this server's connections: Stop cancels them and waits.
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::string> turns;

  void Accept();
  void TurnStarted(const std::string& id) {
    std::lock_guard lock(mu);
    turns.insert(id);
  }
  void TurnEnded(const std::string& id) {
    std::lock_guard lock(mu);
    turns.erase(id);
    cv.notify_all();
  }
};

namespace {

// One HTTP connection. Everything but the engine callbacks and the media-pool work runs on the
// I/O thread; those post back to it.
class Connection : public ConnectionBase, public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<OpenAiHttpServer::Impl> server, tcp::socket socket)
      : server_(std::move(server)), core_(server_->core), stream_(std::move(socket)) {}

  ~Connection() override { --server_->connections; }

  // Closes the socket and cancels the stream's expiry timer: every pending operation then
  // completes (aborted) and releases this connection. Closing only the socket left the timer's
  // wait holding it, and through it the server, in a cycle that outlived the server.
  void ForceClose() override { stream_.close(); }

  void Start(bool over_limit) {
    if (over_limit) {
      close_after_ = true;
      WriteJson(503, OpenAiErrorJson(UnavailableError(
                         "the server has {} connections open, its limit; retry shortly",
                         server_->options.max_connections)));
      return;
    }
    ReadRequest(server_->options.idle_timeout);
  }

 private:
  void ReadRequest(std::chrono::milliseconds first_byte_timeout) {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(server_->options.max_body_bytes);
    request_id_ = core_->NewId("req");
    // The whole request (headers and body) must arrive in request_timeout; a kept-alive idle
    // connection gets idle_timeout for its next request.
    stream_.expires_after(std::max(first_byte_timeout, server_->options.request_timeout));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset ||
        ec == net::error::eof) {
      return Close();
    }
    if (ec == http::error::body_limit) {  // from the Content-Length alone
      return RefuseBeforeBody(
          413, InvalidArgumentError("the request body is over the limit of {} bytes (send "
                                    "large media with gRPC's UploadMedia and name it "
                                    "framezip://media/ID)",
                                    server_->options.max_body_bytes));
    }
    if (ec == http::error::header_limit) {
      close_after_ = true;
      return WriteJson(431,
                       OpenAiErrorJson(InvalidArgumentError(
                           "the request's headers are over the limit of {} bytes", kHeaderLimit)));
    }
    if (ec) {
      close_after_ = true;
      return WriteJson(
          400, OpenAiErrorJson(InvalidArgumentError("malformed HTTP request: {}", ec.message())));
    }
    // From the deadline set for the first byte, the rest of the request gets request_timeout.
    stream_.expires_after(server_->options.request_timeout);
    const auto& h = parser_->get();
    keep_alive_ = h.keep_alive();
    const std::string target(h.target());
    const std::string path = target.substr(0, target.find('?'));
    const bool has_body = parser_->content_length().value_or(parser_->chunked() ? 1 : 0) > 0;
    if (path == "/health" || path == "/ready" || path == "/v1/models") {
      if (h.method() != http::verb::get && h.method() != http::verb::head) {
        return RefuseBeforeBody(405, InvalidArgumentError("{} takes GET", path));
      }
      if (has_body) close_after_ = true;  // its body is not read
      if (path == "/health") return WriteJson(200, R"({"status":"ok"})");
      if (path == "/ready") {
        const bool ready = !core_->draining.load() && core_->engine->model().name != "none";
        return WriteJson(ready ? 200 : 503,
                         ready ? R"({"status":"ready"})" : R"({"status":"not ready"})");
      }
      StatusOr<std::string> principal = Admit(/*refuse_when_draining=*/false);
      if (!principal.ok())
        return RefuseBeforeBody(HttpStatusOf(principal.status()), principal.status());
      return WriteJson(200, ModelListJson(core_->engine->model().name, UnixSeconds()));
    }
    if (path != "/v1/chat/completions") {
      return RefuseBeforeBody(404, NotFoundError("no route {} (this server serves "
                                                 "/v1/chat/completions, /v1/models, /health, "
                                                 "/ready)",
                                                 ClientText(path)));
    }
    if (h.method() != http::verb::post) {
      return RefuseBeforeBody(405, InvalidArgumentError("/v1/chat/completions takes POST"));
    }
    // Authentication and the size limit are settled on the headers alone.
    StatusOr<std::string> principal = Admit(/*refuse_when_draining=*/true);
    if (!principal.ok()) {
      return RefuseBeforeBody(HttpStatusOf(principal.status()), principal.status());
    }
    principal_ = *principal;
    if (const auto length = parser_->content_length();
        length && *length > server_->options.max_body_bytes) {
      return RefuseBeforeBody(
          413, InvalidArgumentError("the request body is {} bytes, over the limit of {} (send "
                                    "large media with gRPC's UploadMedia and name it "
                                    "framezip://media/ID)",
                                    *length, server_->options.max_body_bytes));
    }
    const std::string type(h[http::field::content_type]);
    const std::string mime = type.substr(0, type.find(';'));
    if (!beast::iequals(mime, "application/json")) {
      return RefuseBeforeBody(
          415,
          InvalidArgumentError("Content-Type: '{}' is not application/json", ClientText(type)));
    }
    if (beast::iequals(h[http::field::expect], "100-continue")) {
      auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      net::async_write(stream_, net::buffer(*cont),
                       [self = shared_from_this(), cont](beast::error_code ec, size_t) {
                         if (ec) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  StatusOr<std::string> Admit(bool refuse_when_draining) {
    const auto& h = parser_->get();
    std::optional<std::string> tenant;
    if (core_->auth != nullptr && !core_->auth->tenant_header().empty()) {
      tenant = HeaderValue(h, core_->auth->tenant_header());
    }
    return core_->AdmitHeaders(HeaderValue(h, "authorization"), tenant, refuse_when_draining);
  }

  void ReadBody() {
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
  }

  void OnBody(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return RefuseBeforeBody(413, InvalidArgumentError("the request body is over the limit of "
                                                        "{} bytes",
                                                        server_->options.max_body_bytes));
    }
    if (ec) return Close();  // timeout (a trickled request), reset, or malformed chunking
    stream_.expires_never();
    auto body = std::make_shared<std::string>(std::move(parser_->get().body()));
    parser_.reset();
    turn_id_ = request_id_;
    created_ = UnixSeconds();
    WatchClient();
    core_->media_pool->Post([self = shared_from_this(), body] { self->Prepare(*body); });
  }

  // Media pool: parse, validate, write and probe the media, then hand the turn to the engine.
  void Prepare(const std::string& body) {
    Status status;
    std::vector<std::filesystem::path> files;
    try {
      StatusOr<OpenAiChatRequest> request = ParseChatCompletionRequest(body);
      status = request.status();
      if (status.ok()) {
        stream_mode_ = request->stream;
        include_usage_ = request->include_usage;
        status = LoadLocalMedia(server_->options.local_media_dir,
                                server_->options.max_local_media_bytes, *request);
        std::vector<MediaInfo> stored;
        for (const std::string& id : request->stored_media_ids) {
          if (!status.ok()) break;
          if (std::any_of(stored.begin(), stored.end(),
                          [&](const MediaInfo& m) { return m.media_id == id; })) {
            continue;
          }
          StatusOr<MediaInfo> m = core_->FindPrincipalMedia(principal_, id);
          if (!m.ok()) {
            status = m.status();
            break;
          }
          stored.push_back(*std::move(m));
        }
        if (status.ok()) {
          StatusOr<TurnRequest> turn =
              PrepareStatelessTurn(*core_, request->generate, stored, turn_id_, principal_, &files);
          status = turn.status();
          if (status.ok()) {
            model_ = turn->model;
            turn->cancel_flag = cancel_flag_;
            // A conversation this principal already holds continues as its session's next turn.
            std::optional<ConversationTurn> conversation =
                ResumeConversation(*core_, *turn, &files);
            if (conversation.has_value()) {
              conversation_ = std::move(conversation);
              return Submit(conversation_->turn, std::move(files));
            }
            return Submit(*std::move(turn), std::move(files));
          }
        }
      }
    } catch (const std::exception& e) {
      FZ_LOG_ERROR("{} request {}: {}", kRpc, turn_id_, e.what());
      status = InternalError("the server failed to prepare the request (request id {})", turn_id_);
    }
    RemoveTurnFiles(*core_, std::move(files));
    net::post(server_->ioc, [self = shared_from_this(), status] { self->FailBeforeTurn(status); });
  }

  void Submit(TurnRequest turn, std::vector<std::filesystem::path> files) {
    temp_files_ = std::move(files);
    turn.cancel_flag = cancel_flag_;
    turn.arrival = Clock::now();
    server_->TurnStarted(turn_id_);
    auto self = shared_from_this();
    TurnCallbacks callbacks{
        [self](std::string text, std::vector<uint32_t>) {
          if (self->conversation_.has_value()) self->recorded_answer_ += text;
          net::post(self->server_->ioc, [self, text = std::move(text)] { self->OnDelta(text); });
        },
        [self](Status status, TurnStats stats) {
          auto deliver = [self, status, stats = std::move(stats)]() mutable {
            net::post(self->server_->ioc,
                      [self, status = std::move(status), stats = std::move(stats)]() mutable {
                        self->OnTurnDone(std::move(status), std::move(stats));
                      });
          };
          if (!self->conversation_.has_value()) return deliver();
          // The session records the answer (and the shared store gets the new revision) before
          // the client hears the turn is done, so its next request finds it on any replica.
          std::optional<std::string> answer;
          if (status.ok()) answer = self->recorded_answer_;
          self->core_->store_pool->Post(
              [self, deliver = std::move(deliver), answer = std::move(answer)]() mutable {
                EndConversationTurn(*self->core_, *self->conversation_, answer);
                deliver();
              });
        }};
    const Status status = core_->engine->Submit(std::move(turn), std::move(callbacks));
    if (!status.ok()) {
      if (conversation_.has_value()) EndConversationTurn(*core_, *conversation_, std::nullopt);
      server_->TurnEnded(turn_id_);
      RemoveTurnFiles(*core_, std::move(temp_files_));
      net::post(server_->ioc, [self, status] { self->FailBeforeTurn(status); });
    }
  }

  void FailBeforeTurn(const Status& status) {
    core_->Outcome(kRpc, turn_id_, status, kProtocol);
    if (client_gone_) return Close();
    WriteJson(HttpStatusOf(status), OpenAiErrorJson(status));
  }

  // While the turn runs, a read that completes tells that the client went away (EOF or reset):
  // the turn is cancelled then. Bytes of a pipelined next request end the watch.
  void WatchClient() {
    stream_.socket().async_wait(
        tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
          if (ec) return;  // closed or cancelled by us
          char byte;
          const ssize_t n =
              ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            self->ClientGone("the client closed the connection");
          }
        });
  }

  void ClientGone(const char* why) {
    if (client_gone_) return;
    client_gone_ = true;
    if (!turn_done_ && !turn_id_.empty()) {
      cancel_flag_->store(true);
      core_->engine->Cancel(turn_id_, CancelledError("{}", why));
    }
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  void OnDelta(const std::string& text) {
    answer_ += text;
    if (!stream_mode_ || client_gone_ || text.empty()) return;
    pending_ += ChatChunkEvent(turn_id_, created_, model_, &text, !role_sent_, nullptr);
    role_sent_ = true;
    Pump();
  }

  void OnTurnDone(Status status, TurnStats stats) {
    turn_done_ = true;
    server_->TurnEnded(turn_id_);
    RemoveTurnFiles(*core_, std::move(temp_files_));
    if (core_->metrics != nullptr) core_->metrics->RecordTurn(stats, kProtocol);
    core_->Outcome(kRpc, turn_id_, status, kProtocol);
    FZ_LOG_INFO(
        "turn {} rpc={} status={} prompt_tokens={} cached_tokens={} generated_tokens={} "
        "ttft_s={:.4f} e2e_s={:.4f}",
        turn_id_, kRpc, status.ok() ? "OK" : MessageOf(status), stats.prompt_tokens,
        stats.cached_tokens, stats.generated_tokens, stats.time_to_first_token_seconds,
        stats.e2e_seconds);
    if (client_gone_) return Close();
    if (!stream_mode_) {
      if (!status.ok()) return WriteJson(HttpStatusOf(status), OpenAiErrorJson(status));
      return WriteJson(200, ChatCompletionJson(turn_id_, created_, model_, answer_, stats));
    }
    if (!status.ok()) {
      if (!head_sent_ && pending_.empty()) {
        return WriteJson(HttpStatusOf(status), OpenAiErrorJson(status));
      }
      // Mid-stream: the error goes as an event, as OpenAI-compatible servers do.
      pending_ += "data: " + OpenAiErrorJson(status) + "\n\n";
    } else {
      if (!role_sent_) {
        pending_ += ChatChunkEvent(turn_id_, created_, model_, nullptr, true, nullptr);
        role_sent_ = true;
      }
      pending_ += ChatChunkEvent(turn_id_, created_, model_, nullptr, false, &stats.finish_reason);
      if (include_usage_) pending_ += ChatUsageEvent(turn_id_, created_, model_, stats);
    }
    pending_ += "data: [DONE]\n\n";
    stream_end_due_ = true;
    Pump();
  }

  // Streams: one write in flight; text that arrives meanwhile joins `pending_` and goes out with
  // the next write.
  void Pump() {
    if (writing_ || client_gone_) return;
    if (!head_sent_) {
      writing_ = true;
      head_sent_ = true;
      head_.emplace(http::status::ok, 11);
      head_->set(http::field::content_type, "text/event-stream");
      head_->set(http::field::cache_control, "no-cache");
      head_->set("x-framezip-request-id", request_id_);
      head_->keep_alive(keep_alive_);
      head_->chunked(true);
      head_serializer_.emplace(*head_);
      stream_.expires_after(server_->options.write_timeout);
      http::async_write_header(
          stream_, *head_serializer_,
          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnStreamWrite(ec); });
      return;
    }
    if (!pending_.empty()) {
      in_flight_ = std::move(pending_);
      pending_.clear();
      writing_ = true;
      stream_.expires_after(server_->options.write_timeout);
      net::async_write(
          stream_, http::make_chunk(net::buffer(in_flight_)),
          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnStreamWrite(ec); });
      return;
    }
    if (stream_end_due_) {
      stream_end_due_ = false;
      writing_ = true;
      stream_.expires_after(server_->options.write_timeout);
      net::async_write(stream_, http::make_chunk_last(),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         self->writing_ = false;
                         if (ec) return self->Close();
                         self->AfterResponse();
                       });
    }
  }

  void OnStreamWrite(beast::error_code ec) {
    writing_ = false;
    if (ec) {
      // Timeout: the client stopped reading; otherwise it went away.
      return ClientGone(ec == beast::error::timeout ? "the client stopped reading the stream"
                                                    : "the client closed the connection");
    }
    Pump();
  }

  // A response refused on its headers: the body (if any) is never read, so the connection closes
  // after the answer.
  void RefuseBeforeBody(int status, const Status& why) {
    core_->Outcome(kRpc, request_id_, why, kProtocol);
    close_after_ = true;
    WriteJson(status, OpenAiErrorJson(why));
  }

  void WriteJson(int status, std::string body) {
    response_.emplace(static_cast<http::status>(status), 11);
    response_->set(http::field::content_type, "application/json");
    response_->set("x-framezip-request-id", request_id_);
    if (status == 503) response_->set(http::field::retry_after, "1");
    response_->keep_alive(keep_alive_ && !close_after_);
    response_->body() = std::move(body);
    response_->prepare_payload();
    stream_.expires_after(server_->options.write_timeout);
    http::async_write(stream_, *response_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return self->Close();
                        self->AfterResponse();
                      });
  }

  void AfterResponse() {
    if (close_after_ || !keep_alive_ || server_->stopping) return Close();
    // The next request on this connection starts clean.
    stream_.socket().cancel();
    turn_id_.clear();
    answer_.clear();
    pending_.clear();
    model_.clear();
    conversation_.reset();
    recorded_answer_.clear();
    stream_mode_ = include_usage_ = role_sent_ = head_sent_ = turn_done_ = false;
    stream_end_due_ = false;
    cancel_flag_ = std::make_shared<std::atomic<bool>>(false);
    head_serializer_.reset();
    head_.reset();
    ReadRequest(server_->options.idle_timeout);
  }

  void Close() {
    beast::error_code ignored;
    if (close_after_ && stream_.socket().is_open()) {
      // Let the peer read the answer before the close: a close with its unread body still queued
      // would reset the connection and could lose the answer.
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      DrainThenClose();
      return;
    }
    stream_.socket().close(ignored);
  }

  // Reads and drops what the client still sends, for at most a second and 1 MiB, then closes.
  void DrainThenClose() {
    stream_.expires_after(std::chrono::seconds(1));
    drain_buf_.resize(64 * 1024);
    stream_.async_read_some(net::buffer(drain_buf_),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->drained_ += n;
                              if (ec || self->drained_ > (1u << 20)) {
                                beast::error_code ignored;
                                self->stream_.socket().close(ignored);
                                return;
                              }
                              self->DrainThenClose();
                            });
  }

  std::shared_ptr<OpenAiHttpServer::Impl> server_;
  ServiceCore* const core_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
  std::optional<http::response<http::empty_body>> head_;
  std::optional<http::response_serializer<http::empty_body>> head_serializer_;
  std::string request_id_;
  std::string principal_;
  bool keep_alive_ = true;
  bool close_after_ = false;
  std::vector<char> drain_buf_;
  size_t drained_ = 0;

  // The turn (I/O thread, except the fields Prepare sets before Submit posts anything).
  std::string turn_id_;
  std::string model_;
  int64_t created_ = 0;
  bool stream_mode_ = false;
  bool include_usage_ = false;
  std::shared_ptr<std::atomic<bool>> cancel_flag_ = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::filesystem::path> temp_files_;
  std::optional<ConversationTurn> conversation_;  // set when the turn continues a conversation
  std::string recorded_answer_;                   // the engine's thread only, for the session
  std::string answer_;
  std::string pending_;
  std::string in_flight_;
  bool writing_ = false;
  bool head_sent_ = false;
  bool role_sent_ = false;
  bool stream_end_due_ = false;
  bool turn_done_ = false;
  bool client_gone_ = false;
};

}  // namespace

void OpenAiHttpServer::Impl::Accept() {
  acceptor.async_accept(
      net::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
        if (ec == net::error::operation_aborted || self->stopping) return;
        if (!ec) {
          const bool over = self->connections.load() >= self->options.max_connections;
          ++self->connections;
          auto connection = std::make_shared<Connection>(self, std::move(s));
          std::erase_if(self->open, [](const auto& w) { return w.expired(); });
          self->open.push_back(connection);
          connection->Start(over);
        }
        self->Accept();
      });
}

OpenAiHttpServer::OpenAiHttpServer(ServiceCore* core, OpenAiHttpOptions options)
    : impl_(std::make_shared<Impl>(core, options)) {}

OpenAiHttpServer::~OpenAiHttpServer() { Stop(); }

StatusOr<int> OpenAiHttpServer::Start(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgumentError("--openai-listen: '{}' is not HOST:PORT", address);
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "*") host = "0.0.0.0";
  if (host == "localhost") host = "127.0.0.1";
  int port = -1;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
  }
  beast::error_code ec;
  const net::ip::address ip = net::ip::make_address(host, ec);
  if (ec || port < 0 || port > 65535) {
    return InvalidArgumentError("--openai-listen: '{}' is not ADDRESS:PORT", address);
  }
  const tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return UnavailableError("cannot serve the OpenAI API on {}: {}", address, ec.message());
  }
  const int bound = impl_->acceptor.local_endpoint().port();
  impl_->Accept();
  impl_->thread = std::thread([impl = impl_] { impl->ioc.run(); });
  return bound;
}

void OpenAiHttpServer::Stop() {
  if (!impl_->thread.joinable()) return;
  // Turns still running are cancelled and waited for, so no engine callback reaches a connection
  // after the I/O thread is gone.
  std::vector<std::string> running;
  {
    std::lock_guard lock(impl_->mu);
    running.assign(impl_->turns.begin(), impl_->turns.end());
  }
  for (const std::string& id : running) {
    impl_->core->engine->Cancel(id, UnavailableError("the server is shutting down"));
  }
  {
    std::unique_lock lock(impl_->mu);
    impl_->cv.wait_for(lock, std::chrono::seconds(30), [&] { return impl_->turns.empty(); });
  }
  // Then every connection is closed: their operations end, and with no work left the I/O
  // thread's run() returns (nothing is left queued that could keep the server alive).
  net::post(impl_->ioc, [impl = impl_] {
    impl->stopping = true;
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    for (const auto& w : impl->open) {
      if (auto c = w.lock()) c->ForceClose();
    }
    impl->open.clear();
  });
  // A connection ends once its last completion has run; a timer Beast still holds (a stream's
  // expiry) must not keep the thread for its whole timeout, so the loop is stopped after that.
  for (int i = 0; i < 200 && impl_->connections.load() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  impl_->ioc.stop();
  impl_->thread.join();
  // Completions still queued (aborted operations) hold connections, which hold the server: run
  // them here, so nothing outlives Stop.
  impl_->ioc.restart();
  impl_->ioc.poll();
}

}  // namespace framezip::server
