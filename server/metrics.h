// Prometheus metrics of the server (docs/architecture.md §5), with vLLM's meanings under a
// framezip_ prefix, served at /metrics on their own port. Every series has the label model_name.
//
//   framezip_time_to_first_token_seconds   histogram, from the request's arrival
//   framezip_inter_token_latency_seconds   histogram, one sample per generated token after the
//                                          first (token-weighted, as vLLM's)
//   framezip_e2e_request_latency_seconds   histogram, arrival to the last token or the failure
//   framezip_request_queue_time_seconds    histogram, arrival to admission into the batch
//   framezip_num_requests_running          gauge, turns in the batch
//   framezip_num_requests_waiting          gauge, turns being prepared or waiting for KV room
//   framezip_kv_cache_usage_ratio          gauge, engine KV bytes in use / budget (0-1)
//   framezip_prefix_cache_queries_total    counter, prompt tokens looked up (tokens)
//   framezip_prefix_cache_hits_total       counter, of them restored from cache (tokens)
//   framezip_prompt_tokens_total           counter
//   framezip_generation_tokens_total       counter
//   framezip_media_decode_seconds          histogram (upload probe and per-turn decode)
//   framezip_vision_encode_seconds         histogram
//   framezip_frames_sampled_total          counter, frames planned for the model at upload
//   framezip_visual_tokens_total{stage}    counter, stage = before_pruning | after_pruning
//   framezip_kv_bytes{tier,precision}      gauge, session KV held, by tier and precision
//   framezip_kv_compression_ratio          histogram, f16-equivalent / stored bytes per turn
//   framezip_important_token_ratio         histogram, ZipVL's mean kept ratio per turn
//   framezip_kv_restore_seconds{tier}      histogram
// plus framezip_requests_total{rpc,code}, the outcome of every RPC; framezip_kv_store_up (gauge,
// 1 while the session KV store serves) and framezip_kv_store_commits_total{result} (ok, failed);
// framezip_sessions_not_durable (gauge, sessions whose KV the store does not fully hold) and
// framezip_kv_chains_lost_total (counter, sessions found whose KV the store had lost);
// framezip_kv_commit_queue_depth (gauge), framezip_kv_commits_deferred_total and
// framezip_kv_commits_coalesced_total (counters): the commit queue off the step thread;
// framezip_upload_buffer_bytes (gauge, bytes reserved by uploads in progress).
//
// Thread-safe (prometheus-cpp metrics are).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/turn_engine.h"
#include "server/turn_types.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace framezip::server {

class MetricsHttpServer;

class ServerMetrics {
 public:
  explicit ServerMetrics(const std::string& model_name);
  ~ServerMetrics();

  // A finished turn (OK or not); `stats` holds what was measured. `protocol` ("grpc" or "http",
  // the OpenAI-compatible API) labels the per-request families: requests, TTFT, inter-token
  // latency, end-to-end and queue time, prompt and generated tokens.
  void RecordTurn(const TurnStats& stats, const std::string& protocol = "grpc");
  void RecordMediaProbe(double seconds, uint32_t frames_planned);
  void RecordRpc(const std::string& rpc, const std::string& code,
                 const std::string& protocol = "grpc");
  // Gauges from the engine's load and the sessions' KV, refreshed by the server's housekeeping.
  void SetLoad(const EngineLoad& load, const std::vector<KvBytes>& session_kv);
  void SetStoreHealth(const KvStoreHealth& health);
  void SetUploadBufferBytes(uint64_t bytes);

  // Serves /metrics on `address` ("127.0.0.1:0" picks a port); returns the bound port.
  StatusOr<int> Serve(const std::string& address);
  // The text exposition (what /metrics returns), for tests and `framezip bench`.
  std::string Text() const;

 private:
  std::map<std::string, std::string> Labels(std::map<std::string, std::string> extra = {}) const;
  prometheus::Histogram& Hist(prometheus::Family<prometheus::Histogram>& family,
                              const std::vector<double>& buckets,
                              std::map<std::string, std::string> labels = {});

  const std::string model_name_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>* ttft_;
  prometheus::Family<prometheus::Histogram>* itl_;
  prometheus::Family<prometheus::Histogram>* e2e_;
  prometheus::Family<prometheus::Histogram>* queue_;
  prometheus::Family<prometheus::Gauge>* running_;
  prometheus::Family<prometheus::Gauge>* waiting_;
  prometheus::Family<prometheus::Gauge>* kv_usage_;
  prometheus::Family<prometheus::Counter>* prefix_queries_;
  prometheus::Family<prometheus::Counter>* prefix_hits_;
  prometheus::Family<prometheus::Counter>* prompt_tokens_;
  prometheus::Family<prometheus::Counter>* generation_tokens_;
  prometheus::Family<prometheus::Histogram>* media_decode_;
  prometheus::Family<prometheus::Histogram>* vision_encode_;
  prometheus::Family<prometheus::Counter>* frames_sampled_;
  prometheus::Family<prometheus::Counter>* visual_tokens_;
  prometheus::Family<prometheus::Gauge>* kv_bytes_;
  prometheus::Family<prometheus::Histogram>* compression_ratio_;
  prometheus::Family<prometheus::Histogram>* important_ratio_;
  prometheus::Family<prometheus::Histogram>* kv_restore_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Gauge>* store_up_;
  prometheus::Family<prometheus::Counter>* store_commits_;
  prometheus::Family<prometheus::Gauge>* not_durable_;
  prometheus::Family<prometheus::Gauge>* commit_queue_depth_;
  prometheus::Family<prometheus::Counter>* commits_deferred_;
  prometheus::Family<prometheus::Counter>* commits_coalesced_;
  prometheus::Family<prometheus::Counter>* chains_lost_;
  prometheus::Family<prometheus::Gauge>* upload_bytes_;
  uint64_t reported_commits_ = 0;            // guarded by kv_mu_
  uint64_t reported_failed_commits_ = 0;     // guarded by kv_mu_
  uint64_t reported_deferred_ = 0;           // guarded by kv_mu_
  uint64_t reported_coalesced_ = 0;          // guarded by kv_mu_
  uint64_t reported_chains_lost_ = 0;        // guarded by kv_mu_
  std::unique_ptr<MetricsHttpServer> http_;  // stopped first in the destructor
  std::mutex kv_mu_;
  std::set<std::pair<KvTier, KvPrecision>> kv_series_;  // guarded by kv_mu_
};

}  // namespace framezip::server
