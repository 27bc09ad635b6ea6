// StoreMetrics on prometheus-cpp: the framezip_kv_* metric set (docs/architecture.md §5).
//
//   framezip_kv_bytes{tier,precision}            gauge    resident bytes (Redis: written by us)
//   framezip_kv_blocks{tier,precision}           gauge    resident blocks
//   framezip_kv_capacity_bytes{tier}             gauge
//   framezip_kv_tier_available{tier}             gauge    0 while a configured tier is down
//   framezip_kv_hits_total{tier}                 counter  reads served by the tier
//   framezip_kv_misses_total{tier}               counter  reads the tier could not serve
//   framezip_kv_evictions_total{tier}            counter
//   framezip_kv_promotions_total{tier}           counter  blocks copied up to host, by source
//   framezip_kv_demotions_total{tier}            counter  blocks moved down from host, by target
//   framezip_kv_corrupt_blocks_total{tier}       counter  records that failed CRC, never served
//   framezip_kv_write_failures_total{tier}       counter  disk full / I/O error / Redis down
//   framezip_kv_restore_seconds{tier}            histogram  time to read a block back
//
// Lives in its own library (framezip_kvstore_prometheus) so the core store does not link
// prometheus-cpp. Register on the process's registry; the exposer is the process's business.
// Thread-safe (prometheus-cpp metrics are).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>

#include "kvstore/metrics.h"

namespace framezip::kvstore {

class PrometheusStoreMetrics final : public StoreMetrics {
 public:
  explicit PrometheusStoreMetrics(prometheus::Registry& registry);

  void AddResident(Tier tier, Precision precision, int64_t bytes, int64_t blocks) override;
  void SetCapacity(Tier tier, uint64_t bytes) override;
  void SetAvailable(Tier tier, bool available) override;
  void Hit(Tier tier) override { PerTier(tier).hits->Increment(); }
  void Miss(Tier tier) override { PerTier(tier).misses->Increment(); }
  void Eviction(Tier tier) override { PerTier(tier).evictions->Increment(); }
  void Promotion(Tier from) override { PerTier(from).promotions->Increment(); }
  void Demotion(Tier to) override { PerTier(to).demotions->Increment(); }
  void Corrupt(Tier tier) override { PerTier(tier).corrupt->Increment(); }
  void WriteFailure(Tier tier) override { PerTier(tier).write_failures->Increment(); }
  void RestoreSeconds(Tier tier, double seconds) override {
    PerTier(tier).restore_seconds->Observe(seconds);
  }

 private:
  static constexpr int kTiers = 4;  // host, disk, redis, remote
  struct TierMetrics {
    std::array<prometheus::Gauge*, kNumPrecisions> bytes{};
    std::array<prometheus::Gauge*, kNumPrecisions> blocks{};
    prometheus::Gauge* capacity = nullptr;
    prometheus::Gauge* available = nullptr;
    prometheus::Counter* hits = nullptr;
    prometheus::Counter* misses = nullptr;
    prometheus::Counter* evictions = nullptr;
    prometheus::Counter* promotions = nullptr;
    prometheus::Counter* demotions = nullptr;
    prometheus::Counter* corrupt = nullptr;
    prometheus::Counter* write_failures = nullptr;
    prometheus::Histogram* restore_seconds = nullptr;
  };
  TierMetrics& PerTier(Tier tier) { return tiers_[static_cast<int>(tier) - 2]; }

  std::array<TierMetrics, kTiers> tiers_;
};

}  // namespace framezip::kvstore
