// The host-RAM tier: a byte-bounded LRU of immutable blocks. Pinned blocks (PinTable) are skipped
// by eviction; a Put that cannot make room without evicting a pinned block fails with
// RESOURCE_EXHAUSTED and changes nothing. Evicted blocks are returned to the caller (the tiered
// store), which demotes them to a lower tier when no lower tier holds them yet.
//
// Thread-safe: one mutex; block bytes are shared_ptrs so a Get never copies the block.
#pragma once

#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "kvstore/metrics.h"
#include "kvstore/pin_table.h"
#include "kvstore/types.h"

namespace framezip::kvstore {

struct HostTierOptions {
  uint64_t capacity_bytes = 1ull << 30;
};

struct EvictedBlock {
  BlockKey key;
  Block block;
};

class HostTier {
 public:
  HostTier(HostTierOptions options, const PinTable* pins, StoreMetrics* metrics);
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;
  ~HostTier();

  // Inserts the block as most recently used (a present key is only touched). Returns the blocks
  // evicted to make room, least recently used first.
  StatusOr<std::vector<EvictedBlock>> Put(const BlockKey& key, BlockBytes bytes, uint32_t crc32c,
                                          Precision precision);
  // A hit marks the block most recently used. Counts a hit or a miss.
  std::optional<Block> Get(const BlockKey& key);
  // Size of a present block, without touching LRU order or counters.
  std::optional<uint64_t> SizeOf(const BlockKey& key) const;
  bool Contains(const BlockKey& key) const { return SizeOf(key).has_value(); }
  bool Erase(const BlockKey& key);
  // The block without touching LRU order or counters (flush, tests).
  std::optional<Block> Peek(const BlockKey& key) const;
  // Keys present now, most recently used first.
  std::vector<BlockKey> Keys() const;
  TierStats Stats() const;

 private:
  struct Entry {
    BlockKey key;
    Block block;
  };
  using List = std::list<Entry>;  // front = most recently used
  void RemoveLocked(List::iterator it);

  const HostTierOptions options_;
  const PinTable* pins_;
  StoreMetrics* metrics_;
  mutable std::mutex mu_;
  List lru_;
  std::unordered_map<BlockKey, List::iterator, BlockKeyHash> index_;
  uint64_t bytes_ = 0;
  uint64_t bytes_by_precision_[kNumPrecisions] = {};
  uint64_t blocks_by_precision_[kNumPrecisions] = {};
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace framezip::kvstore
