// The store's metric events, behind an interface so the core store counts without depending on
// an exporter. The daemon and the server plug in PrometheusStoreMetrics
// (kvstore/prometheus_metrics.h, framezip_kv_* names, docs/architecture.md §5); tests and
// benches use the no-op default.
//
// Thread-safety: implementations must accept calls from any thread concurrently; calls are made
// with tier locks held, so they must be cheap and must not call back into the store.
#pragma once

#include <cstdint>

#include "kvstore/types.h"

namespace framezip::kvstore {

class StoreMetrics {
 public:
  virtual ~StoreMetrics() = default;
  // Resident bytes and blocks of a tier changed (gauges framezip_kv_bytes / framezip_kv_blocks).
  virtual void AddResident(Tier, Precision, int64_t /*bytes*/, int64_t /*blocks*/) {}
  virtual void SetCapacity(Tier, uint64_t /*bytes*/) {}
  virtual void SetAvailable(Tier, bool) {}
  virtual void Hit(Tier) {}
  virtual void Miss(Tier) {}
  virtual void Eviction(Tier) {}
  // A block copied up to the host tier from `from`.
  virtual void Promotion(Tier /*from*/) {}
  // A block moved from the host tier down to `to` under memory pressure.
  virtual void Demotion(Tier /*to*/) {}
  // A record or value failed its CRC or framing check and was dropped, never served.
  virtual void Corrupt(Tier) {}
  // A write failed (disk full, I/O error, Redis down); the block went to other tiers or failed.
  virtual void WriteFailure(Tier) {}
  // Seconds to read a block back from a tier (framezip_kv_restore_seconds{tier}).
  virtual void RestoreSeconds(Tier, double) {}
};

// Does nothing; the default sink.
StoreMetrics& NullStoreMetrics();

}  // namespace framezip::kvstore
