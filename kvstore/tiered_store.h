// TieredStore: the embedded KvStore. Host RAM over local disk over (optionally) Redis; any tier
// may be left out.
//
// Writes (WriteMode):
//   kWriteThrough  Put writes every configured tier at or below PutOptions::highest_tier before
//                  returning (disk per its fsync policy, Redis when redis_write_through).
//   kWriteBack     Put writes the highest tier only (host); a block reaches disk when the host
//                  tier evicts it (demotion) or on Flush(). Faster, not durable until then.
// A tier that fails (disk full, Redis down) is logged and counted and the block goes to the
// others; Put fails (RESOURCE_EXHAUSTED) only when no tier took it.
//
// Reads: host, then disk, then Redis; the first intact copy wins (a corrupt copy is dropped and
// the next tier is tried). A hit below host is promoted to host (GetOptions::promote); blocks the
// host tier evicts to make room are demoted to disk (or Redis without a disk tier) when no lower
// tier holds them yet, so pressure never drops the only copy of a block.
//
// Lookup finds the longest present prefix of a key chain; it can pin what it found for a session
// and prefetch it (background promotion to host). Pins have a TTL (default_pin_ttl).
//
// Thread-safe: all methods, concurrently. One background thread serves prefetches.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/metrics.h"
#include "kvstore/pin_table.h"
#include "kvstore/redis_tier.h"
#include "kvstore/store.h"

namespace framezip::kvstore {

enum class WriteMode { kWriteThrough, kWriteBack };

// "through", "back".
StatusOr<WriteMode> ParseWriteMode(std::string_view name);

struct TieredStoreOptions {
  std::optional<HostTierOptions> host = HostTierOptions{};
  std::optional<DiskTierOptions> disk;    // none by default
  std::optional<RedisTierOptions> redis;  // none by default
  WriteMode write_mode = WriteMode::kWriteThrough;
  // In write-through mode, also write every block to Redis (the tier replicas share).
  bool redis_write_through = true;
  uint64_t max_block_bytes = 256ull << 20;
  std::chrono::seconds default_pin_ttl{600};
  // Not owned; must outlive the store. nullptr = no metrics.
  StoreMetrics* metrics = nullptr;
};

class TieredStore final : public KvStore {
 public:
  // Opens the configured tiers (the disk tier rebuilds its index here).
  static StatusOr<std::unique_ptr<TieredStore>> Open(TieredStoreOptions options);
  ~TieredStore() override;

  StatusOr<PutResult> Put(const BlockKey& key, std::string bytes,
                          const PutOptions& options = {}) override;
  StatusOr<Block> Get(const BlockKey& key, const GetOptions& options = {}) override;
  StatusOr<LookupResult> Lookup(std::span<const BlockKey> keys,
                                const LookupOptions& options = {}) override;
  StatusOr<uint32_t> Delete(std::span<const BlockKey> keys) override;
  StatusOr<uint32_t> Pin(const std::string& session_id, std::span<const BlockKey> keys,
                         std::chrono::seconds ttl = std::chrono::seconds(0)) override;
  StatusOr<uint32_t> Unpin(const std::string& session_id,
                           std::span<const BlockKey> keys) override;
  StatusOr<StoreStats> Stats() override;

  // Write-back: writes every host-only block to disk; then syncs the disk tier.
  Status Flush();
  // Compacts the disk tier (no-op without one).
  StatusOr<int> CompactDisk();
  // Blocks until queued prefetches are done (tests, drain).
  void WaitForPrefetches();

  HostTier* host() { return host_.get(); }
  DiskTier* disk() { return disk_.get(); }
  RedisTier* redis() { return redis_.get(); }

 private:
  explicit TieredStore(TieredStoreOptions options);
  // Puts into the host tier and demotes what it evicted. False when the host tier refused.
  bool PutHost(const BlockKey& key, const Block& block);
  void Demote(const std::vector<EvictedBlock>& evicted);
  void PrefetchLoop();

  const TieredStoreOptions options_;
  StoreMetrics* metrics_;
  PinTable pins_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<RedisTier> redis_;

  std::mutex prefetch_mu_;
  std::condition_variable prefetch_cv_;
  std::condition_variable prefetch_idle_cv_;
  std::deque<BlockKey> prefetch_queue_;
  bool prefetch_busy_ = false;
  bool stopping_ = false;
  uint64_t promotions_[6] = {};  // by source tier value
  std::mutex stats_mu_;
  std::thread prefetch_thread_;
};

}  // namespace framezip::kvstore
