#include "server/config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <exception>

#include "common/flags.h"
#include "engine/compress/policy_config.h"

namespace framezip::server {
namespace {

void Register(FlagSet& f, ServerConfig& c) {
  f.String("config", &c.config_file, "YAML file with any of these settings (keys as flag names)",
           "FILE");
  f.String("listen", &c.listen, "gRPC address; port 0 picks a free one", "ADDR");
  f.String("port-file", &c.port_file, "write the bound gRPC port here once serving", "FILE");
  f.String("metrics-listen", &c.metrics_listen,
           "Prometheus /metrics address (its own port); empty = off", "ADDR");
  f.String("metrics-port-file", &c.metrics_port_file, "write the bound metrics port here", "FILE");
  f.String("openai-listen", &c.openai_listen,
           "OpenAI-compatible HTTP API address (/v1/chat/completions, /v1/models, /health, "
           "/ready); empty = off",
           "ADDR");
  f.String("openai-port-file", &c.openai_port_file, "write the bound OpenAI API port here", "FILE");
  f.Int("openai-max-body-bytes", &c.openai_max_body_bytes,
        "largest OpenAI API request body (413 above it, refused before it is read)");
  f.Int("openai-request-timeout-seconds", &c.openai_request_timeout_seconds,
        "time an OpenAI API request's headers and body get to arrive");
  f.Int("openai-write-timeout-seconds", &c.openai_write_timeout_seconds,
        "an OpenAI API answer write that makes no progress this long drops the client and "
        "cancels its turn");
  f.Int("openai-max-connections", &c.openai_max_connections,
        "OpenAI API connections open at once (503 past it)");
  f.Int("openai-max-conversations", &c.openai_max_conversations,
        "OpenAI API conversations kept for KV reuse (the least recently used idle one makes room)");
  f.String("openai-local-media-dir", &c.openai_local_media_dir,
           "OpenAI API media URLs file:///PATH are read from under this directory; empty = "
           "refused (no server-side reads of client-named paths)",
           "DIR");
  f.Int("openai-conversation-ttl-seconds", &c.openai_conversation_ttl_seconds,
        "idle time after which a kept OpenAI API conversation is freed; 0 = --session-ttl-seconds");
  f.Int("grace-seconds", &c.grace_seconds,
        "on SIGTERM, time in-flight turns get to finish before they are cancelled");
  f.String("log-level", &c.log_level, "trace|debug|info|warn|error", "LEVEL");
  f.String("log-format", &c.log_format, "text|json (JSON lines)", "FORMAT");
  f.String("model", &c.model_dir, "Hugging Face model directory to serve", "DIR");
  f.String("device", &c.device, "cpu or cuda:N", "DEVICE");
  f.String("weight-format", &c.weight_format,
           "decoder projection weights: bf16 (as the checkpoint stores them), int8 (quantised "
           "at load per output channel; CPU only) or fp8 (E4M3 per output channel; GPU, sm_90 "
           "for FP8 GEMMs, bf16 kept elsewhere)",
           "FORMAT");
  f.String("vision-weight-format", &c.vision_weight_format,
           "vision tower projection weights: bf16 (as the checkpoint stores them) or int8 "
           "(quantised at load per output channel; CPU only)",
           "FORMAT");
  f.String("default-policy", &c.default_policy,
           "compression policy of sessions that ask for none, with options as the CLI's --policy: "
           "NAME[:KEY=VALUE,...], NAME one of none|zipvl|attentionpack|zipvl+attentionpack|"
           "dynamic_llava|fastv|kivi|kivi4",
           "POLICY");
  f.Int("kv-budget-bytes", &c.kv_budget_bytes, "engine KV memory budget; 0 = the engine's default");
  f.Int("memory-budget-bytes", &c.memory_budget_bytes,
        "weights and KV together: the KV pool gets what the loaded weights leave (8-bit weights "
        "leave more); 0 = off, the KV budget alone");
  f.Double("gpu-memory-utilization", &c.gpu_memory_utilization,
           "on a GPU, --memory-budget-bytes as this fraction of the device's memory, in (0, 1]; "
           "activations and workspaces need the rest; 0 = off");
  f.String("kvstore", &c.kvstore,
           "where session KV is kept between turns: 'embedded' (in this process), 'none', or the "
           "address of a framezip-kvstore",
           "ADDR");
  f.Int("kvstore-host-bytes", &c.kvstore_host_bytes, "embedded KV store: host-RAM tier size");
  f.String("kvstore-disk-path", &c.kvstore_disk_path,
           "embedded KV store: disk tier directory (write-back, flushed at drain); empty = none",
           "DIR");
  f.String("kvstore-redis", &c.kvstore_redis,
           "embedded KV store: a Redis tier replicas share (write-through); empty = none",
           "HOST:PORT");
  f.String("share-sessions", &c.share_sessions,
           "share sessions with other replicas through the KV store: auto (when the store is a "
           "framezip-kvstore or has a Redis tier), on, off",
           "MODE");
  f.Int("kv-commit-queue", &c.kv_commit_queue,
        "sessions whose KV commit may wait for the store at once (off the step thread); past "
        "it a commit is deferred to the session's next one or the drain");
  f.Int("max-running", &c.max_running, "turns decoded together in one batch at most");
  f.Int("max-waiting", &c.max_waiting,
        "turns queued for admission at most; more get RESOURCE_EXHAUSTED");
  f.Int("step-token-budget", &c.step_token_budget,
        "tokens per engine step (decode tokens of running turns + prefill chunks)");
  f.Int("prefill-chunk-tokens", &c.prefill_chunk_tokens, "largest prefill chunk of one turn");
  f.Int("prepare-threads", &c.prepare_threads, "threads that tokenize and encode media for turns");
  f.Int("default-max-tokens", &c.default_max_tokens, "max_tokens of turns that set none");
  f.Int("max-running-per-principal", &c.max_running_per_principal,
        "turns of one caller (token or tenant) running at once; 0 = no cap");
  f.Int("max-queued-tokens-per-principal", &c.max_queued_tokens_per_principal,
        "prompt + max_tokens of one caller's waiting and running turns; 0 = no cap");
  f.Int("max-prompt-bytes", &c.max_prompt_bytes,
        "text bytes of one request's prompt, refused before tokenizing when larger");
  f.Int("max-sessions", &c.max_sessions, "sessions held at most");
  f.Int("max-media-per-session", &c.max_media_per_session, "media items per session at most");
  f.Int("session-ttl-seconds", &c.session_ttl_seconds,
        "idle time after which a session and its KV are freed (sessions that set no TTL)");
  f.Int("max-session-ttl-seconds", &c.max_session_ttl_seconds, "largest TTL a session may ask");
  f.Int("max-upload-bytes", &c.max_upload_bytes, "largest media upload");
  f.Int("max-frames", &c.max_frames, "frames one media item may give the model at most");
  f.Double("max-video-seconds", &c.max_video_seconds, "longest video accepted");
  f.String("media-dir", &c.media_dir,
           "where uploaded media are kept; empty = a temporary directory removed at exit", "DIR");
  f.Int("media-threads", &c.media_threads, "threads that probe uploads");
  f.Int("max-upload-buffer-bytes", &c.max_upload_buffer_bytes,
        "bytes all uploads in progress may hold together");
  f.Int("upload-idle-timeout-seconds", &c.upload_idle_timeout_seconds,
        "an upload that sends nothing for this long is ended");
  f.String("media-isolation", &c.media_isolation,
           "where media is decoded: 'process' (sandboxed framezip-media-worker processes, the "
           "only mode: the server links no decoder)",
           "MODE");
  f.String("media-worker", &c.media_worker,
           "the media worker binary; empty = framezip-media-worker beside framezip-server", "FILE");
  f.Int("media-workers", &c.media_workers, "media worker processes decoding at once");
  f.Int("media-worker-memory-bytes", &c.media_worker_memory_bytes,
        "address-space limit of one media worker");
  f.Int("media-worker-cpu-seconds", &c.media_worker_cpu_seconds,
        "CPU time one media decode may use");
  f.Int("max-message-bytes", &c.max_message_bytes,
        "largest gRPC message received (Generate's inline media; uploads come in chunks)");
  f.Int("keepalive-time-seconds", &c.keepalive_time_seconds,
        "server keepalive ping interval on idle connections");
  f.Int("keepalive-timeout-seconds", &c.keepalive_timeout_seconds,
        "time to wait for a keepalive ping's ack");
  f.Int("min-client-ping-interval-seconds", &c.min_client_ping_interval_seconds,
        "client pings closer than this are strikes (clients pinging every 30 s are fine)");
  f.String("auth-token-file", &c.auth_token_file,
           "require 'authorization: Bearer <token>' with a token from this file ('TOKEN' or "
           "'NAME TOKEN' a line)",
           "FILE");
  f.String("tenant-header", &c.tenant_header,
           "metadata key a trusted proxy sets to the tenant a call acts for; empty = off", "KEY");
  f.String("tenant-proxy-principals", &c.tenant_proxy_principals,
           "comma-separated token names allowed to set --tenant-header", "NAMES");
  f.String("tls-cert-file", &c.tls_cert_file, "serve TLS with this PEM certificate chain", "FILE");
  f.String("tls-key-file", &c.tls_key_file, "PEM private key of --tls-cert-file", "FILE");
  f.Int("housekeeping-ms", &c.housekeeping_ms, "how often sessions expire and gauges refresh");
}

// The --config value from the command line or FRAMEZIP_CONFIG, before full parsing.
std::string FindConfigFile(const std::vector<std::string>& args) {
  std::string file;
  if (const char* env = std::getenv("FRAMEZIP_CONFIG")) file = env;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) file = args[i + 1];
    if (args[i].rfind("--config=", 0) == 0) file = args[i].substr(9);
  }
  return file;
}

// The YAML file as "--key value" arguments, so it goes through the same parsers as flags.
StatusOr<std::vector<std::string>> YamlArgs(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    return InvalidArgumentError("config file '{}': {}", path, e.what());
  }
  std::vector<std::string> args;
  if (root.IsNull()) return args;
  if (!root.IsMap()) {
    return InvalidArgumentError("config file '{}': the top level must be a mapping of settings",
                                path);
  }
  for (const auto& entry : root) {
    std::string key;
    try {
      key = entry.first.as<std::string>();
    } catch (const std::exception&) {
      return InvalidArgumentError("config file '{}': a key is not a string", path);
    }
    for (char& ch : key) {
      if (ch == '_') ch = '-';
    }
    if (key == "config") {
      return InvalidArgumentError("config file '{}': 'config' cannot be set inside a config file",
                                  path);
    }
    if (!entry.second.IsScalar()) {
      return InvalidArgumentError("config file '{}': '{}' must be a single value", path, key);
    }
    args.push_back("--" + key + "=" + entry.second.Scalar());
  }
  return args;
}

}  // namespace

StatusOr<ConfigLoad> LoadServerConfig(const std::vector<std::string>& args,
                                      const std::string& program) {
  ConfigLoad load;
  FlagSet flags(program,
                "Serves framezip's gRPC API (framezip.v1.VideoChat, grpc.health.v1, reflection) "
                "and Prometheus metrics.\nSettings come from defaults < --config YAML < "
                "FRAMEZIP_<NAME> environment variables < flags.");
  Register(flags, load.config);
  load.help_text = flags.Help();
  const std::string config_file = FindConfigFile(args);
  if (!config_file.empty()) {
    FZ_ASSIGN_OR_RETURN(std::vector<std::string> yaml_args, YamlArgs(config_file));
    Status s = flags.Parse(yaml_args);
    if (!s.ok()) return Annotate(s, fmt::format("config file '{}'", config_file));
  }
  FZ_RETURN_IF_ERROR(flags.ApplyEnvironment());
  Status s = flags.Parse(args);
  if (FlagSet::IsHelp(s)) {
    load.help = true;
    return load;
  }
  FZ_RETURN_IF_ERROR(s);
  if (!flags.positional().empty()) {
    return InvalidArgumentError("unexpected argument '{}' (settings are --flags)",
                                flags.positional().front());
  }
  FZ_RETURN_IF_ERROR(ValidateServerConfig(load.config));
  return load;
}

Status ValidateServerConfig(const ServerConfig& c) {
  auto positive = [](int64_t v, const char* name) -> Status {
    if (v <= 0) return InvalidArgumentError("--{}: {} must be > 0", name, v);
    return absl::OkStatus();
  };
  FZ_RETURN_IF_ERROR(positive(c.max_running, "max-running"));
  FZ_RETURN_IF_ERROR(positive(c.max_waiting, "max-waiting"));
  FZ_RETURN_IF_ERROR(positive(c.step_token_budget, "step-token-budget"));
  FZ_RETURN_IF_ERROR(positive(c.prefill_chunk_tokens, "prefill-chunk-tokens"));
  FZ_RETURN_IF_ERROR(positive(c.prepare_threads, "prepare-threads"));
  FZ_RETURN_IF_ERROR(positive(c.default_max_tokens, "default-max-tokens"));
  FZ_RETURN_IF_ERROR(positive(c.max_sessions, "max-sessions"));
  FZ_RETURN_IF_ERROR(positive(c.max_media_per_session, "max-media-per-session"));
  FZ_RETURN_IF_ERROR(positive(c.session_ttl_seconds, "session-ttl-seconds"));
  FZ_RETURN_IF_ERROR(positive(c.max_session_ttl_seconds, "max-session-ttl-seconds"));
  FZ_RETURN_IF_ERROR(positive(c.max_upload_bytes, "max-upload-bytes"));
  FZ_RETURN_IF_ERROR(positive(c.max_frames, "max-frames"));
  FZ_RETURN_IF_ERROR(positive(c.media_threads, "media-threads"));
  FZ_RETURN_IF_ERROR(positive(c.max_prompt_bytes, "max-prompt-bytes"));
  FZ_RETURN_IF_ERROR(positive(c.max_upload_buffer_bytes, "max-upload-buffer-bytes"));
  FZ_RETURN_IF_ERROR(positive(c.upload_idle_timeout_seconds, "upload-idle-timeout-seconds"));
  FZ_RETURN_IF_ERROR(positive(c.media_workers, "media-workers"));
  FZ_RETURN_IF_ERROR(positive(c.media_worker_memory_bytes, "media-worker-memory-bytes"));
  FZ_RETURN_IF_ERROR(positive(c.media_worker_cpu_seconds, "media-worker-cpu-seconds"));
  FZ_RETURN_IF_ERROR(positive(c.openai_max_body_bytes, "openai-max-body-bytes"));
  FZ_RETURN_IF_ERROR(positive(c.openai_request_timeout_seconds, "openai-request-timeout-seconds"));
  FZ_RETURN_IF_ERROR(positive(c.openai_write_timeout_seconds, "openai-write-timeout-seconds"));
  FZ_RETURN_IF_ERROR(positive(c.openai_max_connections, "openai-max-connections"));
  FZ_RETURN_IF_ERROR(positive(c.openai_max_conversations, "openai-max-conversations"));
  if (c.openai_conversation_ttl_seconds < 0 ||
      c.openai_conversation_ttl_seconds > c.max_session_ttl_seconds) {
    return InvalidArgumentError(
        "--openai-conversation-ttl-seconds: {} is not in [0, --max-session-ttl-seconds {}]",
        c.openai_conversation_ttl_seconds, c.max_session_ttl_seconds);
  }
  if (c.max_running_per_principal < 0) {
    return InvalidArgumentError("--max-running-per-principal: must be >= 0");
  }
  if (c.max_queued_tokens_per_principal < 0) {
    return InvalidArgumentError("--max-queued-tokens-per-principal: must be >= 0");
  }
  if (c.max_prompt_bytes > (int64_t{16} << 20)) {
    return InvalidArgumentError("--max-prompt-bytes: {} is over the limit of 16 MiB",
                                c.max_prompt_bytes);
  }
  if (c.default_max_tokens > (1 << 20)) {
    return InvalidArgumentError("--default-max-tokens: {} is over the limit of 1048576",
                                c.default_max_tokens);
  }
  if (c.device != "cpu" && c.device != "cuda" && c.device.rfind("cuda:", 0) != 0) {
    return InvalidArgumentError("--device: '{}' is not cpu, cuda or cuda:N", c.device);
  }
  if (c.weight_format != "bf16" && c.weight_format != "int8" && c.weight_format != "fp8") {
    return InvalidArgumentError("--weight-format: '{}' is not bf16, int8 or fp8", c.weight_format);
  }
  if (c.weight_format == "int8" && c.device != "cpu") {
    return InvalidArgumentError("--weight-format: int8 runs on the CPU only; use bf16 or fp8 on {}",
                                c.device);
  }
  if (c.weight_format == "fp8" && c.device == "cpu") {
    return InvalidArgumentError(
        "--weight-format: fp8 runs on GPUs (--device cuda); the CPU's 8-bit format is int8");
  }
  if (c.vision_weight_format != "bf16" && c.vision_weight_format != "int8") {
    return InvalidArgumentError("--vision-weight-format: '{}' is not bf16 or int8",
                                c.vision_weight_format);
  }
  if (c.vision_weight_format == "int8" && c.device != "cpu") {
    return InvalidArgumentError("--vision-weight-format: int8 runs on the CPU only; use bf16 on {}",
                                c.device);
  }
  if (c.share_sessions != "auto" && c.share_sessions != "on" && c.share_sessions != "off") {
    return InvalidArgumentError("--share-sessions: '{}' is not auto, on or off", c.share_sessions);
  }
  if (c.media_isolation == "none") {
    return InvalidArgumentError(
        "--media-isolation: 'none' (decoding in the server) is gone: framezip-server links no "
        "decoder, so media is always decoded in framezip-media-worker processes; use 'process'");
  }
  if (c.media_isolation != "process") {
    return InvalidArgumentError("--media-isolation: '{}' is not 'process'", c.media_isolation);
  }
  FZ_RETURN_IF_ERROR(positive(c.max_message_bytes, "max-message-bytes"));
  FZ_RETURN_IF_ERROR(positive(c.keepalive_time_seconds, "keepalive-time-seconds"));
  FZ_RETURN_IF_ERROR(positive(c.keepalive_timeout_seconds, "keepalive-timeout-seconds"));
  FZ_RETURN_IF_ERROR(positive(c.housekeeping_ms, "housekeeping-ms"));
  FZ_RETURN_IF_ERROR(positive(c.kv_commit_queue, "kv-commit-queue"));
  if (c.grace_seconds < 0) return InvalidArgumentError("--grace-seconds: must be >= 0");
  if (c.kv_budget_bytes < 0) return InvalidArgumentError("--kv-budget-bytes: must be >= 0");
  if (c.memory_budget_bytes < 0) return InvalidArgumentError("--memory-budget-bytes: must be >= 0");
  if (!(c.gpu_memory_utilization >= 0 && c.gpu_memory_utilization <= 1)) {
    return InvalidArgumentError("--gpu-memory-utilization: {} is not in (0, 1] (0 = off)",
                                c.gpu_memory_utilization);
  }
  if ((c.kv_budget_bytes > 0) + (c.memory_budget_bytes > 0) + (c.gpu_memory_utilization > 0) > 1) {
    return InvalidArgumentError(
        "--kv-budget-bytes, --memory-budget-bytes and --gpu-memory-utilization each size the KV "
        "pool: give one of them");
  }
  if (c.gpu_memory_utilization > 0 && c.device.rfind("cuda", 0) != 0) {
    return InvalidArgumentError(
        "--gpu-memory-utilization: device {} is not a GPU; size a CPU engine with "
        "--memory-budget-bytes or --kv-budget-bytes",
        c.device);
  }
  if (c.kvstore_host_bytes <= 0) {
    return InvalidArgumentError("--kvstore-host-bytes: must be > 0");
  }
  if (c.max_video_seconds <= 0) return InvalidArgumentError("--max-video-seconds: must be > 0");
  if (c.min_client_ping_interval_seconds < 0 || c.min_client_ping_interval_seconds > 30) {
    return InvalidArgumentError(
        "--min-client-ping-interval-seconds: {} must be in [0, 30] so clients pinging every "
        "30 s are accepted",
        c.min_client_ping_interval_seconds);
  }
  if (c.session_ttl_seconds > c.max_session_ttl_seconds) {
    return InvalidArgumentError("--session-ttl-seconds: {} is over --max-session-ttl-seconds {}",
                                c.session_ttl_seconds, c.max_session_ttl_seconds);
  }
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return InvalidArgumentError("--tls-cert-file and --tls-key-file must be given together");
  }
  if (c.log_format != "text" && c.log_format != "json") {
    return InvalidArgumentError("--log-format: '{}' is not text or json", c.log_format);
  }
  if (const StatusOr<engine::compress::PolicyConfig> policy =
          engine::compress::ParsePolicyConfig(c.default_policy);
      !policy.ok()) {
    return InvalidArgumentError("--default-policy: {}", MessageOf(policy.status()));
  }
  return absl::OkStatus();
}

}  // namespace framezip::server
