#include "kvstore/host_tier.h"

namespace framezip::kvstore {

HostTier::HostTier(HostTierOptions options, const PinTable* pins, StoreMetrics* metrics)
    : options_(options), pins_(pins), metrics_(metrics) {
  metrics_->SetCapacity(Tier::kHost, options_.capacity_bytes);
  metrics_->SetAvailable(Tier::kHost, true);
}

HostTier::~HostTier() {
  std::lock_guard lock(mu_);
  while (!lru_.empty()) RemoveLocked(std::prev(lru_.end()));
}

void HostTier::RemoveLocked(List::iterator it) {
  const uint64_t size = it->block.bytes->size();
  const auto p = static_cast<int>(it->block.precision);
  bytes_ -= size;
  bytes_by_precision_[p] -= size;
  blocks_by_precision_[p] -= 1;
  metrics_->AddResident(Tier::kHost, it->block.precision, -static_cast<int64_t>(size), -1);
  index_.erase(it->key);
  lru_.erase(it);
}

StatusOr<std::vector<EvictedBlock>> HostTier::Put(const BlockKey& key, BlockBytes bytes,
                                                  uint32_t crc32c, Precision precision) {
  const uint64_t size = bytes->size();
  if (size > options_.capacity_bytes) {
    return ResourceExhaustedError("host tier: block of {} bytes exceeds its capacity of {} bytes",
                                  size, options_.capacity_bytes);
  }
  std::lock_guard lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return std::vector<EvictedBlock>{};
  }
  // Choose victims first, so a Put that cannot fit evicts nothing.
  std::vector<List::iterator> victims;
  uint64_t freed = 0;
  const auto now = PinTable::Clock::now();
  for (auto it = lru_.end(); bytes_ - freed + size > options_.capacity_bytes;) {
    if (it == lru_.begin()) {
      return ResourceExhaustedError(
          "host tier: no room for {} bytes ({} of {} bytes used, the rest pinned)", size, bytes_,
          options_.capacity_bytes);
    }
    --it;
    if (pins_ != nullptr && pins_->IsPinned(it->key, now)) continue;
    victims.push_back(it);
    freed += it->block.bytes->size();
  }
  std::vector<EvictedBlock> evicted;
  evicted.reserve(victims.size());
  for (auto it : victims) {
    evicted.push_back({it->key, it->block});
    RemoveLocked(it);
    ++evictions_;
    metrics_->Eviction(Tier::kHost);
  }
  lru_.push_front({key, Block{std::move(bytes), crc32c, precision, Tier::kHost}});
  index_[key] = lru_.begin();
  bytes_ += size;
  bytes_by_precision_[static_cast<int>(precision)] += size;
  blocks_by_precision_[static_cast<int>(precision)] += 1;
  metrics_->AddResident(Tier::kHost, precision, static_cast<int64_t>(size), 1);
  return evicted;
}

std::optional<Block> HostTier::Get(const BlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    metrics_->Miss(Tier::kHost);
    return std::nullopt;
  }
  ++hits_;
  metrics_->Hit(Tier::kHost);
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->block;
}

std::optional<uint64_t> HostTier::SizeOf(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return it->second->block.bytes->size();
}

bool HostTier::Erase(const BlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  RemoveLocked(it->second);
  return true;
}

std::optional<Block> HostTier::Peek(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return it->second->block;
}

std::vector<BlockKey> HostTier::Keys() const {
  std::lock_guard lock(mu_);
  std::vector<BlockKey> keys;
  keys.reserve(lru_.size());
  for (const Entry& e : lru_) keys.push_back(e.key);
  return keys;
}

TierStats HostTier::Stats() const {
  std::lock_guard lock(mu_);
  TierStats s;
  s.tier = Tier::kHost;
  s.bytes = bytes_;
  s.capacity_bytes = options_.capacity_bytes;
  s.blocks = lru_.size();
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  for (int p = 0; p < kNumPrecisions; ++p) {
    if (blocks_by_precision_[p] != 0) {
      s.bytes_by_precision.push_back(
          {static_cast<Precision>(p), bytes_by_precision_[p], blocks_by_precision_[p]});
    }
  }
  return s;
}

}  // namespace framezip::kvstore
