#include "kvstore/prometheus_metrics.h"

#include <string>

namespace framezip::kvstore {

PrometheusStoreMetrics::PrometheusStoreMetrics(prometheus::Registry& registry) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  auto& bytes = BuildGauge().Name("framezip_kv_bytes")
                    .Help("KV block bytes resident in a store tier, by precision")
                    .Register(registry);
  auto& blocks = BuildGauge().Name("framezip_kv_blocks")
                     .Help("KV blocks resident in a store tier, by precision")
                     .Register(registry);
  auto& capacity = BuildGauge().Name("framezip_kv_capacity_bytes")
                       .Help("Byte capacity of a store tier")
                       .Register(registry);
  auto& available = BuildGauge().Name("framezip_kv_tier_available")
                        .Help("1 when a configured store tier is reachable, 0 while it is down")
                        .Register(registry);
  auto counter = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Counter>& {
    return BuildCounter().Name(name).Help(help).Register(registry);
  };
  auto& hits = counter("framezip_kv_hits_total", "Block reads served by a store tier");
  auto& misses = counter("framezip_kv_misses_total", "Block reads a store tier could not serve");
  auto& evictions = counter("framezip_kv_evictions_total", "Blocks evicted from a store tier");
  auto& promotions = counter("framezip_kv_promotions_total",
                             "Blocks copied up to the host tier, by the tier they came from");
  auto& demotions = counter("framezip_kv_demotions_total",
                            "Blocks moved down from the host tier, by the tier they went to");
  auto& corrupt = counter("framezip_kv_corrupt_blocks_total",
                          "Stored blocks that failed their CRC32C check and were dropped");
  auto& write_failures = counter("framezip_kv_write_failures_total",
                                 "Block writes a store tier failed (disk full, I/O error, down)");
  auto& restore = prometheus::BuildHistogram()
                      .Name("framezip_kv_restore_seconds")
                      .Help("Time to read a KV block back from a store tier")
                      .Register(registry);
  const prometheus::Histogram::BucketBoundaries buckets = {
      1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10};
  for (Tier tier : {Tier::kHost, Tier::kDisk, Tier::kRedis, Tier::kRemote}) {
    const std::string name(TierName(tier));
    TierMetrics& m = PerTier(tier);
    for (int p = 0; p < kNumPrecisions; ++p) {
      const std::string precision(PrecisionName(static_cast<Precision>(p)));
      m.bytes[p] = &bytes.Add({{"tier", name}, {"precision", precision}});
      m.blocks[p] = &blocks.Add({{"tier", name}, {"precision", precision}});
    }
    m.capacity = &capacity.Add({{"tier", name}});
    m.available = &available.Add({{"tier", name}});
    m.hits = &hits.Add({{"tier", name}});
    m.misses = &misses.Add({{"tier", name}});
    m.evictions = &evictions.Add({{"tier", name}});
    m.promotions = &promotions.Add({{"tier", name}});
    m.demotions = &demotions.Add({{"tier", name}});
    m.corrupt = &corrupt.Add({{"tier", name}});
    m.write_failures = &write_failures.Add({{"tier", name}});
    m.restore_seconds = &restore.Add({{"tier", name}}, buckets);
  }
}

void PrometheusStoreMetrics::AddResident(Tier tier, Precision precision, int64_t bytes,
                                         int64_t blocks) {
  TierMetrics& m = PerTier(tier);
  m.bytes[static_cast<int>(precision)]->Increment(static_cast<double>(bytes));
  m.blocks[static_cast<int>(precision)]->Increment(static_cast<double>(blocks));
}

void PrometheusStoreMetrics::SetCapacity(Tier tier, uint64_t bytes) {
  PerTier(tier).capacity->Set(static_cast<double>(bytes));
}

void PrometheusStoreMetrics::SetAvailable(Tier tier, bool available) {
  PerTier(tier).available->Set(available ? 1 : 0);
}

}  // namespace framezip::kvstore
