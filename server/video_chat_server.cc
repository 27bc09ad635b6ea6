#include "server/video_chat_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "common/logging.h"
#include "engine/core/device_health.h"
#include "server/openai_http.h"
#include "server/video_chat_service.h"

namespace framezip::server {
namespace {

constexpr char kServiceName[] = "framezip.v1.VideoChat";
// The session KV store, as this server sees it: NOT_SERVING while it is down (turns still run,
// without keeping their KV between turns), so an operator sees degraded service apart from dead.
constexpr char kStoreServiceName[] = "framezip.kvstore";

StatusOr<std::string> ReadFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError("--{}: '{}' cannot be read", flag, path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

StatusOr<std::filesystem::path> MakeTempDir() {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string pattern = (base / "framezip-media-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return UnavailableError("cannot create a media directory under {}", base.string());
  }
  return std::filesystem::path(pattern);
}

}  // namespace

StatusOr<std::unique_ptr<VideoChatServer>> VideoChatServer::Start(
    const ServerConfig& config, std::unique_ptr<TurnEngine> engine,
    std::shared_ptr<media::MediaBackend> media) {
  FZ_RETURN_IF_ERROR(ValidateServerConfig(config));
  std::unique_ptr<VideoChatServer> s(new VideoChatServer());
  s->config_ = config;
  s->engine_ = std::move(engine);
  s->media_ = std::move(media);
  const ModelDescription& model = s->engine_->model();

  AuthOptions auth;
  auth.token_file = config.auth_token_file;
  auth.tenant_header = config.tenant_header;
  for (size_t start = 0; start < config.tenant_proxy_principals.size();) {
    size_t comma = config.tenant_proxy_principals.find(',', start);
    if (comma == std::string::npos) comma = config.tenant_proxy_principals.size();
    std::string name = config.tenant_proxy_principals.substr(start, comma - start);
    if (!name.empty()) auth.tenant_proxy_principals.push_back(std::move(name));
    start = comma + 1;
  }
  FZ_ASSIGN_OR_RETURN(s->auth_, BearerAuth::Create(auth));
  if (config.media_dir.empty()) {
    FZ_ASSIGN_OR_RETURN(s->media_dir_, MakeTempDir());
    s->remove_media_dir_ = true;
  } else {
    s->media_dir_ = config.media_dir;
    std::error_code ec;
    std::filesystem::create_directories(s->media_dir_, ec);
    if (ec) {
      return InvalidArgumentError("--media-dir: cannot create '{}': {}", config.media_dir,
                                  ec.message());
    }
  }

  SessionLimits limits;
  limits.max_sessions = static_cast<uint32_t>(config.max_sessions);
  limits.max_media_per_session = static_cast<uint32_t>(config.max_media_per_session);
  limits.default_ttl_seconds = static_cast<uint32_t>(config.session_ttl_seconds);
  limits.max_ttl_seconds = static_cast<uint32_t>(config.max_session_ttl_seconds);
  s->sessions_ = std::make_unique<SessionStore>(limits);
  s->metrics_ = std::make_unique<ServerMetrics>(model.name);

  ServiceOptions options;
  StatusOr<PolicyConfig> default_policy = engine::compress::ParsePolicyConfig(config.default_policy);
  if (!default_policy.ok()) {
    return InvalidArgumentError("--default-policy: {}", MessageOf(default_policy.status()));
  }
  options.validation.default_policy = *std::move(default_policy);
  options.validation.served_policies = model.policies;
  options.validation.served_model = model.name;
  options.validation.default_max_tokens = static_cast<uint32_t>(config.default_max_tokens);
  options.validation.max_frames = static_cast<uint32_t>(config.max_frames);
  options.validation.max_prompt_bytes = static_cast<uint32_t>(config.max_prompt_bytes);
  options.validation.vocab_size = model.vocab_size;
  options.upload = UploadLimitsFrom(config);
  options.validation.raw_frames.max_width = options.upload.max_width;
  options.validation.raw_frames.max_height = options.upload.max_height;
  options.validation.raw_frames.max_duration_s = options.upload.max_duration_seconds;
  options.media_dir = s->media_dir_;
  options.media_threads = config.media_threads;
  options.max_upload_buffer_bytes = static_cast<uint64_t>(config.max_upload_buffer_bytes);
  options.upload_idle_timeout = std::chrono::seconds(config.upload_idle_timeout_seconds);
  options.max_conversations = static_cast<uint32_t>(config.openai_max_conversations);
  options.conversation_ttl_seconds = static_cast<uint32_t>(config.openai_conversation_ttl_seconds);
  const bool store_shared = (config.kvstore != "embedded" && config.kvstore != "none" &&
                             !config.kvstore.empty()) ||
                            !config.kvstore_redis.empty();
  const bool share = config.share_sessions == "on" ||
                     (config.share_sessions == "auto" && store_shared);
  if (share) {
    kvstore::KvStore* store = s->engine_->kv_store();
    if (store == nullptr) {
      return InvalidArgumentError(
          "--share-sessions on needs a KV store the replicas share (--kvstore ADDR of a "
          "framezip-kvstore, or --kvstore-redis)");
    }
    s->shared_ = std::make_unique<SharedSessions>(store, model.name);
  }
  s->service_ = std::make_unique<VideoChatService>(s->engine_.get(), s->sessions_.get(),
                                                   s->media_.get(), s->metrics_.get(), &s->auth_,
                                                   options, s->shared_.get());

  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!config.tls_cert_file.empty()) {
    FZ_ASSIGN_OR_RETURN(std::string cert, ReadFile(config.tls_cert_file, "tls-cert-file"));
    FZ_ASSIGN_OR_RETURN(std::string key, ReadFile(config.tls_key_file, "tls-key-file"));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    credentials = grpc::SslServerCredentials(ssl);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, credentials, &s->port_);
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  // Keepalive: the server pings idle connections, and accepts client pings as often as every
  // min_client_ping_interval_seconds, also between calls (clients pinging every 30 s are fine).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, config.keepalive_time_seconds * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             config.keepalive_timeout_seconds * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             config.min_client_ping_interval_seconds * 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return UnavailableError("cannot listen on {}", config.listen);
  }
  auto* health = s->server_->GetHealthCheckService();
  health->SetServingStatus(true);
  // The VideoChat service is SERVING only with a model behind it.
  health->SetServingStatus(kServiceName, model.name != "none");
  health->SetServingStatus(kStoreServiceName, true);

  if (!config.metrics_listen.empty()) {
    StatusOr<int> port = s->metrics_->Serve(config.metrics_listen);
    if (!port.ok()) {
      s->server_->Shutdown(std::chrono::system_clock::now());
      return port.status();
    }
    s->metrics_port_ = *port;
  }
  if (!config.openai_listen.empty()) {
    OpenAiHttpOptions http;
    http.max_body_bytes = static_cast<uint64_t>(config.openai_max_body_bytes);
    http.request_timeout = std::chrono::seconds(config.openai_request_timeout_seconds);
    http.write_timeout = std::chrono::seconds(config.openai_write_timeout_seconds);
    http.max_connections = config.openai_max_connections;
    http.local_media_dir = config.openai_local_media_dir;
    http.max_local_media_bytes = static_cast<uint64_t>(config.max_upload_bytes);
    s->openai_ = std::make_unique<OpenAiHttpServer>(s->service_->core(), http);
    StatusOr<int> port = s->openai_->Start(config.openai_listen);
    if (!port.ok()) {
      s->openai_.reset();
      s->server_->Shutdown(std::chrono::system_clock::now());
      return port.status();
    }
    s->openai_port_ = *port;
  }
  s->housekeeping_ = std::thread([raw = s.get()] { raw->HousekeepingLoop(); });
  FZ_LOG_INFO(
      "framezip-server serving {} on port {} (model {}, metrics port {}, OpenAI API port {}, "
      "auth {}, tls {}, sessions shared {})",
      kServiceName, s->port_, model.name, s->metrics_port_, s->openai_port_,
      s->auth_.enabled() ? "on" : "off", config.tls_cert_file.empty() ? "off" : "on",
      s->shared_ != nullptr ? "on" : "off");
  return s;
}

void VideoChatServer::HousekeepingLoop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    service_->Housekeeping();
    CheckDeviceHealth();
    CheckStoreHealth();
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(config_.housekeeping_ms),
                 [this] { return stopping_; });
  }
}

void VideoChatServer::CheckDeviceHealth() {
  if (device_unhealthy_ || engine::DeviceHealthy()) return;
  device_unhealthy_ = true;
  auto* health = server_->GetHealthCheckService();
  health->SetServingStatus(false);
  health->SetServingStatus(kServiceName, false);
  FZ_LOG_ERROR("GPU unusable after a sticky CUDA error ({}): health is NOT_SERVING until the "
               "process restarts",
               engine::DeviceUnhealthyReason());
}

void VideoChatServer::CheckStoreHealth() {
  const KvStoreHealth health = engine_->StoreHealth();
  metrics_->SetStoreHealth(health);
  if (!health.configured) return;
  std::lock_guard lock(mu_);
  if (drained_ || device_unhealthy_) return;
  if (health.serving != store_serving_) {
    store_serving_ = health.serving;
    server_->GetHealthCheckService()->SetServingStatus(kStoreServiceName, health.serving);
    if (health.serving) {
      FZ_LOG_INFO("KV store serving again; health '{}' SERVING", kStoreServiceName);
    } else {
      FZ_LOG_ERROR("KV store degraded: {}; health '{}' NOT_SERVING ({} failed commits so far)",
                   health.reason, kStoreServiceName, health.failed_commits);
    }
  }
}

void VideoChatServer::Drain(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mu_);
    if (drained_) return;
    drained_ = true;
  }
  const auto deadline = Clock::now() + grace;
  // New turns are refused before health says NOT_SERVING, so a client that sees NOT_SERVING and
  // still sends a turn gets UNAVAILABLE, never a turn started on a draining server (the other order
  // left a window: server_video_chat_test's drain case failed in it under load).
  service_->StartDraining();
  auto* health = server_->GetHealthCheckService();
  health->SetServingStatus(false);
  health->SetServingStatus(kServiceName, false);
  // Turns in flight finish (or are cancelled at the deadline); then the sessions' KV goes to the
  // store. The streams of those turns end as their turns do.
  engine_->Drain(deadline);
  // Every turn has ended: the OpenAI API's answers are out (or their clients were dropped).
  if (openai_) openai_->Stop();
  // What is left (uploads, unary calls) gets the rest of the grace period.
  const auto left = std::max(deadline - Clock::now(), Clock::duration(std::chrono::milliseconds(100)));
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(left));
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (housekeeping_.joinable()) housekeeping_.join();
  FZ_LOG_INFO("framezip-server drained");
}

VideoChatServer::~VideoChatServer() {
  if (server_) Drain(std::chrono::milliseconds(0));
  if (housekeeping_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    housekeeping_.join();
  }
  if (server_) server_->Wait();
  openai_.reset();
  server_.reset();
  service_.reset();  // joins the media pool before the media directory goes
  if (remove_media_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(media_dir_, ec);
  }
}

}  // namespace framezip::server
