#include "kvstore/tiered_store.h"

#include "common/logging.h"
#include "common/crc32c.h"

namespace framezip::kvstore {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StatusOr<WriteMode> ParseWriteMode(std::string_view name) {
  if (name == "through") return WriteMode::kWriteThrough;
  if (name == "back") return WriteMode::kWriteBack;
  return InvalidArgumentError("write mode '{}' is not one of through, back", name);
}

StatusOr<std::unique_ptr<TieredStore>> TieredStore::Open(TieredStoreOptions options) {
  if (!options.host && !options.disk && !options.redis) {
    return InvalidArgumentError("kv store: no tier configured (host, disk or redis)");
  }
  std::unique_ptr<TieredStore> store(new TieredStore(std::move(options)));
  const TieredStoreOptions& o = store->options_;
  if (o.host) store->host_ = std::make_unique<HostTier>(*o.host, &store->pins_, store->metrics_);
  if (o.disk) {
    FZ_ASSIGN_OR_RETURN(store->disk_, DiskTier::Open(*o.disk, &store->pins_, store->metrics_));
  }
  if (o.redis) store->redis_ = std::make_unique<RedisTier>(*o.redis, store->metrics_);
  store->prefetch_thread_ = std::thread([s = store.get()] { s->PrefetchLoop(); });
  return store;
}

TieredStore::TieredStore(TieredStoreOptions options)
    : options_(std::move(options)),
      metrics_(options_.metrics != nullptr ? options_.metrics : &NullStoreMetrics()) {}

TieredStore::~TieredStore() {
  {
    std::lock_guard lock(prefetch_mu_);
    stopping_ = true;
  }
  prefetch_cv_.notify_all();
  if (prefetch_thread_.joinable()) prefetch_thread_.join();
  if (options_.write_mode == WriteMode::kWriteBack && disk_) {
    if (auto s = Flush(); !s.ok()) FZ_LOG_WARN("kv store: flush at close: {}", MessageOf(s));
  }
}

bool TieredStore::PutHost(const BlockKey& key, const Block& block) {
  auto evicted = host_->Put(key, block.bytes, block.crc32c, block.precision);
  if (!evicted.ok()) {
    FZ_LOG_DEBUG("kv store: {}", MessageOf(evicted.status()));
    return false;
  }
  Demote(*evicted);
  return true;
}

void TieredStore::Demote(const std::vector<EvictedBlock>& evicted) {
  for (const EvictedBlock& e : evicted) {
    const std::string& bytes = *e.block.bytes;
    if (disk_) {
      if (disk_->Contains(e.key)) continue;
      auto s = disk_->Put(e.key, bytes, e.block.crc32c, e.block.precision);
      if (s.ok()) {
        metrics_->Demotion(Tier::kDisk);
        continue;
      }
      FZ_LOG_WARN("kv store: demoting {} to disk: {}", BlockKeyHex(e.key), MessageOf(s.status()));
    }
    // Without a disk copy, Redis is the last place for it. In write-through mode with Redis
    // writes on, it is there already.
    const bool in_redis = options_.write_mode == WriteMode::kWriteThrough &&
                          options_.redis_write_through && !disk_;
    if (redis_ && !in_redis) {
      if (redis_->Put(e.key, bytes, e.block.crc32c, e.block.precision, 0).ok()) {
        metrics_->Demotion(Tier::kRedis);
      }
    }
  }
}

StatusOr<PutResult> TieredStore::Put(const BlockKey& key, std::string bytes,
                                     const PutOptions& options) {
  if (bytes.size() > options_.max_block_bytes) {
    return ResourceExhaustedError("kv store: block of {} bytes is over the {}-byte maximum",
                                  bytes.size(), options_.max_block_bytes);
  }
  if (!options.pin_session_id.empty()) {
    // Pin first, so a concurrent Put cannot evict the block between our write and the pin.
    pins_.Pin(options.pin_session_id, key, PinTable::Clock::now() + options_.default_pin_ttl);
  }
  PutResult result;
  if (host_ && host_->Contains(key)) result.tiers.push_back(Tier::kHost);
  if (disk_ && disk_->Contains(key)) {
    result.tiers.push_back(Tier::kDisk);
    result.durable = disk_->options().fsync == FsyncPolicy::kPerBlock;
  }
  if (!result.tiers.empty()) {
    result.already_present = true;
    return result;
  }

  const uint32_t crc = Crc32c(bytes);
  const Block block{std::make_shared<const std::string>(std::move(bytes)), crc, options.precision,
                    Tier::kHost};
  const bool write_back = options_.write_mode == WriteMode::kWriteBack;
  const Tier top = options.highest_tier == Tier::kRemote ? Tier::kHost : options.highest_tier;
  std::vector<std::string> failures;

  if (host_ && top == Tier::kHost) {
    if (PutHost(key, block)) {
      result.tiers.push_back(Tier::kHost);
    } else {
      failures.push_back("host full of pinned blocks");
    }
  }
  const bool done = write_back && !result.tiers.empty();
  if (disk_ && !done && top != Tier::kRedis) {
    auto durable = disk_->Put(key, *block.bytes, crc, block.precision);
    if (durable.ok()) {
      result.tiers.push_back(Tier::kDisk);
      result.durable = *durable;
    } else {
      FZ_LOG_WARN("kv store: {}", MessageOf(durable.status()));
      failures.push_back(MessageOf(durable.status()));
    }
  }
  const bool redis_wanted = top == Tier::kRedis || result.tiers.empty() ||
                            (!write_back && options_.redis_write_through);
  if (redis_ && redis_wanted) {
    auto s = redis_->Put(key, *block.bytes, crc, block.precision, options.redis_ttl_seconds);
    if (s.ok()) {
      result.tiers.push_back(Tier::kRedis);
    } else {
      FZ_LOG_DEBUG("kv store: {}", MessageOf(s));
      failures.push_back(MessageOf(s));
    }
  }
  if (result.tiers.empty()) {
    if (!options.pin_session_id.empty()) pins_.Unpin(options.pin_session_id, key);
    return ResourceExhaustedError("kv store: no tier could take block {} ({} bytes): {}",
                                  BlockKeyHex(key), block.bytes->size(),
                                  fmt::join(failures, "; "));
  }
  return result;
}

StatusOr<Block> TieredStore::Get(const BlockKey& key, const GetOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (host_) {
    if (auto block = host_->Get(key)) {
      metrics_->RestoreSeconds(Tier::kHost, SecondsSince(start));
      return *std::move(block);
    }
  }
  std::string redis_error;
  for (Tier tier : {Tier::kDisk, Tier::kRedis}) {
    StatusOr<Block> block = NotFoundError("not configured");
    if (tier == Tier::kDisk && disk_) {
      block = disk_->Get(key);
    } else if (tier == Tier::kRedis && redis_) {
      block = redis_->Get(key);
      if (absl::IsUnavailable(block.status())) redis_error = "; " + MessageOf(block.status());
    } else {
      continue;
    }
    if (!block.ok()) continue;
    metrics_->RestoreSeconds(tier, SecondsSince(start));
    if (options.promote && host_ && PutHost(key, *block)) {
      metrics_->Promotion(tier);
      std::lock_guard lock(stats_mu_);
      ++promotions_[static_cast<int>(tier)];
    }
    return block;
  }
  return NotFoundError("kv store: no block {}{}", BlockKeyHex(key), redis_error);
}

StatusOr<LookupResult> TieredStore::Lookup(std::span<const BlockKey> keys,
                                           const LookupOptions& options) {
  struct Found {
    std::optional<Tier> tier;
    uint64_t bytes = 0;
  };
  std::vector<Found> found(keys.size());
  std::vector<BlockKey> remote_keys;
  std::vector<size_t> remote_index;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (host_) {
      if (auto size = host_->SizeOf(keys[i])) {
        found[i] = {Tier::kHost, *size};
        continue;
      }
    }
    if (disk_) {
      if (auto size = disk_->SizeOf(keys[i])) {
        found[i] = {Tier::kDisk, *size};
        continue;
      }
    }
    remote_keys.push_back(keys[i]);
    remote_index.push_back(i);
  }
  if (redis_ && !remote_keys.empty()) {
    // One round trip for every key not held locally; Redis down means "not present".
    auto sizes = redis_->SizesOf(remote_keys);
    if (sizes.ok()) {
      for (size_t j = 0; j < remote_keys.size(); ++j) {
        if ((*sizes)[j]) found[remote_index[j]] = {Tier::kRedis, *(*sizes)[j]};
      }
    }
  }
  LookupResult result;
  std::vector<BlockKey> to_prefetch;
  for (size_t i = 0; i < keys.size() && found[i].tier; ++i) {
    ++result.present_prefix;
    result.tiers.push_back(*found[i].tier);
    result.present_bytes += found[i].bytes;
    if (!options.pin_session_id.empty()) {
      pins_.Pin(options.pin_session_id, keys[i], PinTable::Clock::now() + options_.default_pin_ttl);
    }
    if (options.prefetch && host_ && *found[i].tier != Tier::kHost) to_prefetch.push_back(keys[i]);
  }
  if (!to_prefetch.empty()) {
    std::lock_guard lock(prefetch_mu_);
    prefetch_queue_.insert(prefetch_queue_.end(), to_prefetch.begin(), to_prefetch.end());
    prefetch_cv_.notify_one();
  }
  return result;
}

StatusOr<uint32_t> TieredStore::Delete(std::span<const BlockKey> keys) {
  uint32_t deleted = 0;
  for (const BlockKey& key : keys) {
    bool removed = false;
    if (host_) removed |= host_->Erase(key);
    if (disk_) removed |= disk_->Erase(key);
    if (redis_) {
      auto erased = redis_->Erase(key);
      removed |= erased.ok() && *erased;
    }
    pins_.Forget(key);
    if (removed) ++deleted;
  }
  return deleted;
}

StatusOr<uint32_t> TieredStore::Pin(const std::string& session_id, std::span<const BlockKey> keys,
                                    std::chrono::seconds ttl) {
  if (session_id.empty()) return InvalidArgumentError("pin: session_id is empty");
  const auto expiry = PinTable::Clock::now() + (ttl.count() > 0 ? ttl : options_.default_pin_ttl);
  pins_.Sweep();
  std::vector<BlockKey> elsewhere;
  uint32_t pinned = 0;
  for (const BlockKey& key : keys) {
    if ((host_ && host_->Contains(key)) || (disk_ && disk_->Contains(key))) {
      pins_.Pin(session_id, key, expiry);
      ++pinned;
    } else {
      elsewhere.push_back(key);
    }
  }
  if (redis_ && !elsewhere.empty()) {
    if (auto sizes = redis_->SizesOf(elsewhere); sizes.ok()) {
      for (size_t i = 0; i < elsewhere.size(); ++i) {
        if ((*sizes)[i]) {
          pins_.Pin(session_id, elsewhere[i], expiry);
          ++pinned;
        }
      }
    }
  }
  return pinned;
}

StatusOr<uint32_t> TieredStore::Unpin(const std::string& session_id,
                                      std::span<const BlockKey> keys) {
  uint32_t unpinned = 0;
  for (const BlockKey& key : keys) unpinned += pins_.Unpin(session_id, key) ? 1 : 0;
  return unpinned;
}

StatusOr<StoreStats> TieredStore::Stats() {
  StoreStats stats;
  const std::vector<BlockKey> pinned = pins_.PinnedKeys();
  std::lock_guard lock(stats_mu_);
  if (host_) {
    TierStats s = host_->Stats();
    for (const BlockKey& k : pinned) s.pinned_blocks += host_->Contains(k) ? 1 : 0;
    stats.tiers.push_back(std::move(s));
  }
  if (disk_) {
    TierStats s = disk_->Stats();
    for (const BlockKey& k : pinned) s.pinned_blocks += disk_->Contains(k) ? 1 : 0;
    s.promotions = promotions_[static_cast<int>(Tier::kDisk)];
    stats.tiers.push_back(std::move(s));
  }
  if (redis_) {
    TierStats s = redis_->Stats();
    s.promotions = promotions_[static_cast<int>(Tier::kRedis)];
    stats.tiers.push_back(std::move(s));
  }
  return stats;
}

Status TieredStore::Flush() {
  if (!disk_) return absl::OkStatus();
  if (host_) {
    for (const BlockKey& key : host_->Keys()) {
      if (disk_->Contains(key)) continue;
      auto block = host_->Peek(key);
      if (!block) continue;
      FZ_RETURN_IF_ERROR(disk_->Put(key, *block->bytes, block->crc32c, block->precision).status());
    }
  }
  return disk_->Sync();
}

StatusOr<int> TieredStore::CompactDisk() {
  if (!disk_) return 0;
  return disk_->Compact();
}

void TieredStore::WaitForPrefetches() {
  std::unique_lock lock(prefetch_mu_);
  prefetch_idle_cv_.wait(lock, [this] { return prefetch_queue_.empty() && !prefetch_busy_; });
}

void TieredStore::PrefetchLoop() {
  std::unique_lock lock(prefetch_mu_);
  while (true) {
    prefetch_cv_.wait(lock, [this] { return stopping_ || !prefetch_queue_.empty(); });
    if (stopping_) break;
    const BlockKey key = prefetch_queue_.front();
    prefetch_queue_.pop_front();
    prefetch_busy_ = true;
    lock.unlock();
    if (!host_->Contains(key)) (void)Get(key, GetOptions{.promote = true});
    lock.lock();
    prefetch_busy_ = false;
    if (prefetch_queue_.empty()) prefetch_idle_cv_.notify_all();
  }
  prefetch_busy_ = false;
  prefetch_idle_cv_.notify_all();
}

}  // namespace framezip::kvstore
