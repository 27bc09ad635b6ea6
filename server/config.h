// framezip-server's configuration: defaults, then a YAML file (--config F or FRAMEZIP_CONFIG),
// then FRAMEZIP_* environment variables, then command-line flags — each overriding the one
// before. Every setting has one name: the flag --max-upload-bytes, the environment variable
// FRAMEZIP_MAX_UPLOAD_BYTES and the YAML key max_upload_bytes (or max-upload-bytes).
// docs/configuration.md lists them all; `framezip-server --help` prints them with defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace framezip::server {

struct ServerConfig {
  // Process
  std::string config_file;
  std::string listen = "0.0.0.0:50051";
  std::string port_file;
  std::string metrics_listen = "0.0.0.0:9464";  // empty = no metrics endpoint
  std::string metrics_port_file;
  // The OpenAI-compatible HTTP API (server/openai_http.h); empty = off.
  std::string openai_listen;
  std::string openai_port_file;
  int64_t openai_max_body_bytes = int64_t{64} << 20;
  int openai_request_timeout_seconds = 30;
  int openai_write_timeout_seconds = 30;
  int openai_max_connections = 1024;
  int openai_max_conversations = 256;
  int openai_conversation_ttl_seconds = 0;  // 0 = --session-ttl-seconds
  std::string openai_local_media_dir;  // file:///PATH media allowed from here; empty = refused
  int grace_seconds = 30;
  std::string log_level = "info";
  std::string log_format = "text";
  // Model and engine
  std::string model_dir;
  std::string device = "cpu";
  // The decoder's projection weights: bf16 (as stored), int8 (quantised at load, CPU only) or fp8
  // (E4M3 quantised at load, GPU only; engine/runtime/weight_format.h).
  std::string weight_format = "bf16";
  // The vision tower's projection weights: bf16 (as stored) or int8 (quantised at load, CPU only).
  std::string vision_weight_format = "bf16";
  std::string default_policy = "none";
  int64_t kv_budget_bytes = 0;  // 0 = the engine's default
  // Weights and KV pool together (EngineOptions::memory_budget_bytes), given in bytes or, on a
  // GPU, as a fraction of the device's memory (vLLM's --gpu-memory-utilization); 0 = off. At
  // most one of these and kv_budget_bytes.
  int64_t memory_budget_bytes = 0;
  double gpu_memory_utilization = 0;
  std::string kvstore = "embedded";
  int64_t kvstore_host_bytes = int64_t{1} << 30;  // embedded store: host-RAM tier
  std::string kvstore_disk_path;                  // embedded store: disk tier ("" = none)
  std::string kvstore_redis;                      // embedded store: Redis tier ("" = none)
  // Sessions shared by replicas through the KV store: "auto" (when the store is shared: a
  // framezip-kvstore address or a Redis tier), "on", "off".
  std::string share_sessions = "auto";
  // Sessions whose KV commit may wait for the store at once (commits run off the step thread;
  // past this, a session's commit is deferred to its next one or the drain).
  int kv_commit_queue = 256;
  // Scheduler
  int max_running = 16;
  int max_waiting = 64;
  int step_token_budget = 512;
  int prefill_chunk_tokens = 256;
  int prepare_threads = 2;
  int default_max_tokens = 256;
  int max_running_per_principal = 8;                  // 0 = no cap
  int64_t max_queued_tokens_per_principal = 1 << 20;  // prompt + max_tokens; 0 = no cap
  int64_t max_prompt_bytes = 256 * 1024;
  // Sessions and media
  int max_sessions = 1024;
  int max_media_per_session = 8;
  int session_ttl_seconds = 1800;
  int max_session_ttl_seconds = 86400;
  int64_t max_upload_bytes = int64_t{512} << 20;
  int max_frames = 64;
  double max_video_seconds = 4 * 3600.0;
  std::string media_dir;  // empty = a temporary directory removed at exit
  int media_threads = 2;
  int64_t max_upload_buffer_bytes = int64_t{2} << 30;
  int upload_idle_timeout_seconds = 30;
  // Where media is decoded: "process" (sandboxed framezip-media-worker processes), the only mode
  // (the server links no decoder; "none" is refused with a message saying so).
  std::string media_isolation = "process";
  std::string media_worker;  // the worker binary; empty = framezip-media-worker beside this one
  int media_workers = 2;
  int64_t media_worker_memory_bytes = int64_t{4} << 30;
  int media_worker_cpu_seconds = 120;
  // gRPC transport
  int64_t max_message_bytes = int64_t{16} << 20;
  int keepalive_time_seconds = 60;
  int keepalive_timeout_seconds = 20;
  int min_client_ping_interval_seconds = 10;
  // Security
  std::string auth_token_file;
  std::string tenant_header;
  std::string tenant_proxy_principals;  // comma-separated
  std::string tls_cert_file;
  std::string tls_key_file;
  // Internal cadence of session expiry and gauge refresh.
  int housekeeping_ms = 1000;
};

// The result of parsing a command line.
struct ConfigLoad {
  ServerConfig config;
  bool help = false;      // --help was given: print `help_text` and exit 0
  std::string help_text;  // the flag reference
};

// Parses `args` (without argv[0]) over the YAML file and the environment. INVALID_ARGUMENT names
// the flag, variable or YAML key at fault; unknown keys and flags are errors.
StatusOr<ConfigLoad> LoadServerConfig(const std::vector<std::string>& args,
                                      const std::string& program = "framezip-server");

// Cross-field checks (ranges, TLS cert and key together).
Status ValidateServerConfig(const ServerConfig& config);

}  // namespace framezip::server
