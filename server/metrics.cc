#include "server/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <exception>
#include <numeric>
#include <sstream>

#include "server/metrics_http.h"

namespace framezip::server {
namespace {

// Buckets in seconds, from vLLM's (vllm/v1/metrics/loggers.py), so dashboards carry over.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                             5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                             60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kStageBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5,
                                           1.0,   2.5,   5.0,  10.0,  30.0, 60.0, 120.0};
const std::vector<double> kRatioBuckets = {1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 12.0, 16.0};
const std::vector<double> kUnitBuckets = {0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};

}  // namespace

ServerMetrics::ServerMetrics(const std::string& model_name)
    : model_name_(model_name), registry_(std::make_shared<prometheus::Registry>()) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  auto& r = *registry_;
  ttft_ = &BuildHistogram()
               .Name("framezip_time_to_first_token_seconds")
               .Help("Time from a turn's arrival to its first generated token.")
               .Register(r);
  itl_ = &BuildHistogram()
              .Name("framezip_inter_token_latency_seconds")
              .Help("Time between consecutive generated tokens (one sample per token).")
              .Register(r);
  e2e_ = &BuildHistogram()
              .Name("framezip_e2e_request_latency_seconds")
              .Help("Time from a turn's arrival to its end.")
              .Register(r);
  queue_ = &BuildHistogram()
                .Name("framezip_request_queue_time_seconds")
                .Help("Time a turn spent before joining the batch (preparing and waiting).")
                .Register(r);
  running_ = &BuildGauge()
                  .Name("framezip_num_requests_running")
                  .Help("Turns in the engine's batch.")
                  .Register(r);
  waiting_ = &BuildGauge()
                  .Name("framezip_num_requests_waiting")
                  .Help("Turns being prepared or waiting for KV room.")
                  .Register(r);
  kv_usage_ = &BuildGauge()
                   .Name("framezip_kv_cache_usage_ratio")
                   .Help("Engine KV memory in use over its budget (0 to 1).")
                   .Register(r);
  prefix_queries_ = &BuildCounter()
                         .Name("framezip_prefix_cache_queries_total")
                         .Help("Prompt tokens looked up in the prefix cache.")
                         .Register(r);
  prefix_hits_ = &BuildCounter()
                      .Name("framezip_prefix_cache_hits_total")
                      .Help("Prompt tokens whose KV was restored from the cache.")
                      .Register(r);
  prompt_tokens_ = &BuildCounter()
                        .Name("framezip_prompt_tokens_total")
                        .Help("Prompt tokens of finished turns.")
                        .Register(r);
  generation_tokens_ = &BuildCounter()
                            .Name("framezip_generation_tokens_total")
                            .Help("Generated tokens.")
                            .Register(r);
  media_decode_ = &BuildHistogram()
                       .Name("framezip_media_decode_seconds")
                       .Help("Media probing at upload and frame decoding in turns.")
                       .Register(r);
  vision_encode_ = &BuildHistogram()
                        .Name("framezip_vision_encode_seconds")
                        .Help("Vision tower + projector time per turn with new media.")
                        .Register(r);
  frames_sampled_ = &BuildCounter()
                         .Name("framezip_frames_sampled_total")
                         .Help("Video frames chosen for the model.")
                         .Register(r);
  visual_tokens_ = &BuildCounter()
                        .Name("framezip_visual_tokens_total")
                        .Help("Visual tokens of prompts, before and after pruning.")
                        .Register(r);
  kv_bytes_ = &BuildGauge()
                   .Name("framezip_kv_bytes")
                   .Help("KV bytes the sessions hold, by tier and precision.")
                   .Register(r);
  compression_ratio_ = &BuildHistogram()
                            .Name("framezip_kv_compression_ratio")
                            .Help("f16-equivalent over stored KV bytes of a session after a turn.")
                            .Register(r);
  important_ratio_ = &BuildHistogram()
                          .Name("framezip_important_token_ratio")
                          .Help("Mean fraction of tokens ZipVL kept as important in a turn.")
                          .Register(r);
  kv_restore_ = &BuildHistogram()
                     .Name("framezip_kv_restore_seconds")
                     .Help("Time to restore a session's cached KV, by tier.")
                     .Register(r);
  requests_ = &BuildCounter()
                   .Name("framezip_requests_total")
                   .Help("RPCs by method and gRPC status code.")
                   .Register(r);
  store_up_ = &BuildGauge()
                   .Name("framezip_kv_store_up")
                   .Help(
                       "1 while the session KV store is reachable, every tier is up and the "
                       "last commit succeeded; 0 otherwise (absent without a store).")
                   .Register(r);
  store_commits_ = &BuildCounter()
                        .Name("framezip_kv_store_commits_total")
                        .Help(
                            "Session KV segments committed to the store, by result (ok, "
                            "failed).")
                        .Register(r);
  commit_queue_depth_ = &BuildGauge()
                             .Name("framezip_kv_commit_queue_depth")
                             .Help(
                                 "Sessions whose KV commit waits for the store (the commit "
                                 "queue, off the step thread).")
                             .Register(r);
  commits_deferred_ = &BuildCounter()
                           .Name("framezip_kv_commits_deferred_total")
                           .Help(
                               "KV commits deferred to the session's next commit or the drain "
                               "because the commit queue was full (a slow store).")
                           .Register(r);
  chains_lost_ = &BuildCounter()
                      .Name("framezip_kv_chains_lost_total")
                      .Help(
                          "Sessions found whose KV the store no longer held (restarted empty, "
                          "flushed, failed over or evicted); each is committed again whole.")
                      .Register(r);
  commits_coalesced_ = &BuildCounter()
                            .Name("framezip_kv_commits_coalesced_total")
                            .Help(
                                "KV commits folded into one of the same session already waiting "
                                "in the commit queue.")
                            .Register(r);
  not_durable_ = &BuildGauge()
                      .Name("framezip_sessions_not_durable")
                      .Help(
                          "Sessions whose KV the store does not fully hold (a commit failed, "
                          "or the store lost their blocks): their cached KV dies with this "
                          "pod until their next commit (absent without a store).")
                      .Register(r);
  upload_bytes_ = &BuildGauge()
                       .Name("framezip_upload_buffer_bytes")
                       .Help("Bytes reserved by uploads in progress (max_upload_buffer_bytes).")
                       .Register(r);
  // Series that exist from the start, so a scrape shows them at zero.
  running_->Add(Labels());
  waiting_->Add(Labels());
  kv_usage_->Add(Labels());
  for (auto* c :
       {prefix_queries_, prefix_hits_, prompt_tokens_, generation_tokens_, frames_sampled_}) {
    c->Add(Labels());
  }
  visual_tokens_->Add(Labels({{"stage", "before_pruning"}}));
  visual_tokens_->Add(Labels({{"stage", "after_pruning"}}));
  for (const char* protocol : {"grpc", "http"}) {
    Hist(*ttft_, kTtftBuckets, {{"protocol", protocol}});
    Hist(*itl_, kItlBuckets, {{"protocol", protocol}});
    Hist(*e2e_, kRequestBuckets, {{"protocol", protocol}});
    Hist(*queue_, kRequestBuckets, {{"protocol", protocol}});
    prompt_tokens_->Add(Labels({{"protocol", protocol}}));
    generation_tokens_->Add(Labels({{"protocol", protocol}}));
  }
}

ServerMetrics::~ServerMetrics() {
  if (http_) http_->Stop();  // no scrape may run while the families are destroyed
}

std::map<std::string, std::string> ServerMetrics::Labels(
    std::map<std::string, std::string> extra) const {
  extra["model_name"] = model_name_;
  return extra;
}

prometheus::Histogram& ServerMetrics::Hist(prometheus::Family<prometheus::Histogram>& family,
                                           const std::vector<double>& buckets,
                                           std::map<std::string, std::string> labels) {
  return family.Add(Labels(std::move(labels)), buckets);
}

void ServerMetrics::RecordTurn(const TurnStats& s, const std::string& protocol) {
  const std::map<std::string, std::string> by_protocol = {{"protocol", protocol}};
  if (s.generated_tokens > 0) {
    Hist(*ttft_, kTtftBuckets, by_protocol).Observe(s.time_to_first_token_seconds);
  }
  auto& itl = Hist(*itl_, kItlBuckets, by_protocol);
  for (double gap : s.inter_token_seconds) itl.Observe(gap);
  Hist(*e2e_, kRequestBuckets, by_protocol).Observe(s.e2e_seconds);
  Hist(*queue_, kRequestBuckets, by_protocol).Observe(s.queue_seconds);
  prefix_queries_->Add(Labels()).Increment(s.prompt_tokens);
  prefix_hits_->Add(Labels()).Increment(s.cached_tokens);
  prompt_tokens_->Add(Labels(by_protocol)).Increment(s.prompt_tokens);
  generation_tokens_->Add(Labels(by_protocol)).Increment(s.generated_tokens);
  visual_tokens_->Add(Labels({{"stage", "before_pruning"}}))
      .Increment(s.visual_tokens_before_pruning);
  visual_tokens_->Add(Labels({{"stage", "after_pruning"}}))
      .Increment(s.visual_tokens_after_pruning);
  if (s.media_decode_seconds > 0)
    Hist(*media_decode_, kStageBuckets).Observe(s.media_decode_seconds);
  if (s.vision_encode_seconds > 0) {
    Hist(*vision_encode_, kStageBuckets).Observe(s.vision_encode_seconds);
  }
  if (s.cached_tokens > 0) {
    // The tier the prefix came from: engine memory, or the store tier it was restored from.
    Hist(*kv_restore_, kStageBuckets, {{"tier", KvTierName(s.kv_restore_tier)}})
        .Observe(s.kv_restore_seconds);
  }
  if (!s.kv_bytes.empty()) Hist(*compression_ratio_, kRatioBuckets).Observe(s.compression_ratio);
  if (!s.layer_kept_ratio.empty()) {
    const double mean = std::accumulate(s.layer_kept_ratio.begin(), s.layer_kept_ratio.end(), 0.0) /
                        static_cast<double>(s.layer_kept_ratio.size());
    Hist(*important_ratio_, kUnitBuckets).Observe(mean);
  }
}

void ServerMetrics::RecordMediaProbe(double seconds, uint32_t frames_planned) {
  Hist(*media_decode_, kStageBuckets).Observe(seconds);
  frames_sampled_->Add(Labels()).Increment(frames_planned);
}

void ServerMetrics::RecordRpc(const std::string& rpc, const std::string& code,
                              const std::string& protocol) {
  requests_->Add(Labels({{"rpc", rpc}, {"code", code}, {"protocol", protocol}})).Increment();
}

void ServerMetrics::SetLoad(const EngineLoad& load, const std::vector<KvBytes>& session_kv) {
  running_->Add(Labels()).Set(load.running);
  waiting_->Add(Labels()).Set(load.waiting);
  kv_usage_->Add(Labels()).Set(load.kv_capacity_bytes == 0
                                   ? 0.0
                                   : static_cast<double>(load.kv_used_bytes) /
                                         static_cast<double>(load.kv_capacity_bytes));
  std::map<std::pair<KvTier, KvPrecision>, uint64_t> sums;
  for (const KvBytes& kv : session_kv) sums[{kv.tier, kv.precision}] += kv.bytes;
  std::lock_guard lock(kv_mu_);
  for (const auto& [key, bytes] : sums) kv_series_.insert(key);
  // A series that dropped to nothing reads 0 rather than its last value.
  for (const auto& key : kv_series_) {
    auto it = sums.find(key);
    kv_bytes_
        ->Add(Labels({{"tier", KvTierName(key.first)}, {"precision", KvPrecisionName(key.second)}}))
        .Set(it == sums.end() ? 0.0 : static_cast<double>(it->second));
  }
}

void ServerMetrics::SetStoreHealth(const KvStoreHealth& health) {
  if (!health.configured) return;
  store_up_->Add(Labels()).Set(health.serving ? 1 : 0);
  not_durable_->Add(Labels()).Set(static_cast<double>(health.sessions_not_durable));
  // Counters only go up: add what the store's figures grew by since the last refresh.
  std::lock_guard lock(kv_mu_);
  auto& ok = store_commits_->Add(Labels({{"result", "ok"}}));
  auto& failed = store_commits_->Add(Labels({{"result", "failed"}}));
  if (health.commits > reported_commits_) ok.Increment(health.commits - reported_commits_);
  if (health.failed_commits > reported_failed_commits_) {
    failed.Increment(health.failed_commits - reported_failed_commits_);
  }
  reported_commits_ = std::max(reported_commits_, health.commits);
  commit_queue_depth_->Add(Labels()).Set(static_cast<double>(health.commit_queue_depth));
  auto& deferred = commits_deferred_->Add(Labels());
  auto& coalesced = commits_coalesced_->Add(Labels());
  if (health.commits_deferred > reported_deferred_) {
    deferred.Increment(static_cast<double>(health.commits_deferred - reported_deferred_));
  }
  if (health.commits_coalesced > reported_coalesced_) {
    coalesced.Increment(static_cast<double>(health.commits_coalesced - reported_coalesced_));
  }
  auto& chains_lost = chains_lost_->Add(Labels());
  if (health.chains_lost > reported_chains_lost_) {
    chains_lost.Increment(static_cast<double>(health.chains_lost - reported_chains_lost_));
  }
  reported_chains_lost_ = std::max(reported_chains_lost_, health.chains_lost);
  reported_deferred_ = std::max(reported_deferred_, health.commits_deferred);
  reported_coalesced_ = std::max(reported_coalesced_, health.commits_coalesced);
  reported_failed_commits_ = std::max(reported_failed_commits_, health.failed_commits);
}

void ServerMetrics::SetUploadBufferBytes(uint64_t bytes) {
  upload_bytes_->Add(Labels()).Set(static_cast<double>(bytes));
}

StatusOr<int> ServerMetrics::Serve(const std::string& address) {
  http_ = std::make_unique<MetricsHttpServer>([this] { return Text(); });
  return http_->Start(address);
}

std::string ServerMetrics::Text() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace framezip::server
