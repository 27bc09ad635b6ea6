#include "server/session_kv_cache.h"

#include <algorithm>

#include "common/logging.h"

namespace framezip::server {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

KvTier TierOf(kvstore::Tier t) {
  switch (t) {
    case kvstore::Tier::kHost:
      return KvTier::kHost;
    case kvstore::Tier::kDisk:
      return KvTier::kDisk;
    case kvstore::Tier::kRedis:
      return KvTier::kRedis;
    case kvstore::Tier::kRemote:
      return KvTier::kRemote;
  }
  return KvTier::kRemote;
}

// The lower (slower) of two store tiers.
kvstore::Tier Slower(kvstore::Tier a, kvstore::Tier b) {
  return static_cast<uint8_t>(a) >= static_cast<uint8_t>(b) ? a : b;
}

kvstore::Precision StorePrecision(KvPrecision p) {
  switch (p) {
    case KvPrecision::kF32:
      return kvstore::Precision::kF32;
    case KvPrecision::kF16:
      return kvstore::Precision::kF16;
    case KvPrecision::kBF16:
      return kvstore::Precision::kBf16;
    case KvPrecision::kInt8:
      return kvstore::Precision::kInt8;
    case KvPrecision::kInt4:
      return kvstore::Precision::kInt4;
    case KvPrecision::kInt2:
      return kvstore::Precision::kInt2;
    case KvPrecision::kLowRank:
      return kvstore::Precision::kLowRank;
  }
  return kvstore::Precision::kUnspecified;
}

}  // namespace

std::array<uint8_t, 32> MediaHashBytes(const std::string& hex) {
  std::array<uint8_t, 32> out{};
  if (hex.size() != 64) return out;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return {};
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

SessionKvCache::SessionKvCache(std::unique_ptr<kvstore::KvStore> store,
                               kvstore::TieredStore* embedded, SessionKvCacheOptions options)
    : store_(std::move(store)), embedded_(embedded), options_(std::move(options)) {}

Status SessionKvCache::CommitSegment(const std::string& session_id, std::vector<std::string> blocks,
                                     std::span<const int32_t> tokens,
                                     const std::vector<std::array<uint8_t, 32>>& media_hashes,
                                     const std::string& compression_config, KvPrecision precision,
                                     uint64_t covered_messages) {
  // The chain starts from the session's key (its id and 128-bit secret), so no other session,
  // nor a session re-created under the same id, can compute or hit these blocks.
  kvstore::BlockKeyInput root;
  root.model_id = options_.model_id;
  const std::string root_config = "session/" + session_id;
  root.compression_config = root_config;
  kvstore::BlockKey parent = kvstore::ChainBlockKey(kvstore::kRootBlockKey, root);
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_id);
    if (it != sessions_.end() && !it->second.segments.empty()) {
      parent = it->second.segments.back().back().key;
    }
  }
  std::vector<StoredBlock> stored;
  stored.reserve(blocks.size());
  const std::string part_config = compression_config + "/part";
  for (size_t i = 0; i < blocks.size(); ++i) {
    kvstore::BlockKeyInput input;
    input.model_id = options_.model_id;
    if (i == 0) {
      input.compression_config = compression_config;
      input.token_ids = tokens;
      input.media_hashes = media_hashes;
    } else {
      input.compression_config = part_config;
    }
    const kvstore::BlockKey key = kvstore::ChainBlockKey(parent, input);
    StoredBlock b{key, blocks[i].size(), KvTier::kHost};
    kvstore::PutOptions put;
    put.highest_tier = options_.highest_tier;
    put.precision = StorePrecision(precision);
    put.pin_session_id = session_id;
    StatusOr<kvstore::PutResult> r = store_->Put(key, std::move(blocks[i]), put);
    if (!r.ok()) {
      // Nothing of this segment counts: the session's next restore stops at the previous one.
      if (!stored.empty()) {
        std::vector<kvstore::BlockKey> keys;
        for (const StoredBlock& s : stored) keys.push_back(s.key);
        (void)store_->Unpin(session_id, keys);
      }
      failed_commits_.fetch_add(1);
      last_commit_failed_.store(true);
      return Annotate(r.status(),
                      fmt::format("storing KV of session '{}'", SessionIdOfKey(session_id)));
    }
    if (!r->tiers.empty()) b.tier = TierOf(r->tiers.front());
    stored.push_back(b);
    parent = key;
  }
  std::vector<kvstore::BlockKey> keys;
  for (const StoredBlock& s : stored) keys.push_back(s.key);
  // Put pins with the store's default TTL; the session may live longer.
  if (StatusOr<uint32_t> pinned = store_->Pin(session_id, keys, options_.pin_ttl); !pinned.ok()) {
    FZ_LOG_WARN("session '{}': pinning its KV blocks failed: {}", SessionIdOfKey(session_id),
                MessageOf(pinned.status()));
  }
  commits_.fetch_add(1);
  last_commit_failed_.store(false);
  std::lock_guard lock(mu_);
  SessionBlocks& s = sessions_[session_id];
  s.precision = precision;
  s.covered_messages = covered_messages;
  for (const StoredBlock& b : stored) ++refs_[b.key];
  s.segments.push_back(std::move(stored));
  return absl::OkStatus();
}

void SessionKvCache::Adopt(const std::string& session_id, const SharedKvState& kv) {
  const auto& segments = kv.segments;
  const KvPrecision precision = kv.precision;
  SessionBlocks adopted;
  adopted.precision = precision;
  adopted.covered_messages = kv.stored_messages;
  std::vector<kvstore::BlockKey> keys;
  for (const auto& segment : segments) {
    std::vector<StoredBlock> blocks;
    for (const SharedKvState::Block& b : segment) {
      blocks.push_back({b.key, b.bytes, KvTier::kRemote});
      keys.push_back(b.key);
    }
    adopted.segments.push_back(std::move(blocks));
  }
  if (!keys.empty()) {
    if (StatusOr<uint32_t> pinned = store_->Pin(session_id, keys, options_.pin_ttl); !pinned.ok()) {
      FZ_LOG_WARN("session '{}': pinning adopted KV blocks failed: {}", SessionIdOfKey(session_id),
                  MessageOf(pinned.status()));
    }
  }
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it != sessions_.end()) {
    for (const auto& segment : it->second.segments) {
      for (const StoredBlock& b : segment) {
        if (--refs_[b.key] <= 0) refs_.erase(b.key);
      }
    }
  }
  for (const auto& segment : adopted.segments) {
    for (const StoredBlock& b : segment) ++refs_[b.key];
  }
  sessions_[session_id] = std::move(adopted);
}

SharedKvState SessionKvCache::SharedState(const std::string& session_id) const {
  SharedKvState out;
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return out;
  out.precision = it->second.precision;
  for (const auto& segment : it->second.segments) {
    std::vector<SharedKvState::Block> blocks;
    for (const StoredBlock& b : segment) blocks.push_back({b.key, b.bytes});
    out.segments.push_back(std::move(blocks));
  }
  out.stored_messages = out.segments.empty() ? 0 : it->second.covered_messages;
  return out;
}

KvStoreHealth SessionKvCache::Health() {
  KvStoreHealth health;
  health.configured = true;
  health.commits = commits_.load();
  health.failed_commits = failed_commits_.load();
  StatusOr<kvstore::StoreStats> stats = store_->Stats();
  if (!stats.ok()) {
    health.serving = false;
    health.tiers_up = false;
    health.reason = fmt::format("the KV store cannot be reached: {}", MessageOf(stats.status()));
    return health;
  }
  for (const kvstore::TierStats& tier : stats->tiers) {
    if (!tier.available) {
      health.serving = false;
      health.tiers_up = false;
      health.reason =
          fmt::format("the KV store's {} tier is unavailable", kvstore::TierName(tier.tier));
      return health;
    }
  }
  if (last_commit_failed_.load()) {
    health.serving = false;
    health.reason = "the last commit of session KV to the store failed";
  }
  return health;
}

size_t SessionKvCache::segments(const std::string& session_id) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  return it == sessions_.end() ? 0 : it->second.segments.size();
}

StatusOr<bool> SessionKvCache::ChainPresent(const std::string& session_id) {
  std::vector<kvstore::BlockKey> keys;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return true;
    for (const auto& seg : it->second.segments) {
      for (const StoredBlock& b : seg) keys.push_back(b.key);
    }
  }
  if (keys.empty()) return true;
  FZ_ASSIGN_OR_RETURN(const kvstore::LookupResult found, store_->Lookup(keys));
  return found.present_prefix == keys.size();
}

StatusOr<LoadedSessionKv> SessionKvCache::Load(const std::string& session_id) {
  std::vector<std::vector<kvstore::BlockKey>> keys;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || it->second.segments.empty()) {
      return NotFoundError("session '{}' has no KV in the store", SessionIdOfKey(session_id));
    }
    for (const auto& seg : it->second.segments) {
      keys.emplace_back();
      for (const StoredBlock& b : seg) keys.back().push_back(b.key);
    }
  }
  const auto t0 = Clock::now();
  LoadedSessionKv out;
  for (const auto& seg : keys) {
    out.segments.emplace_back();
    for (const kvstore::BlockKey& key : seg) {
      FZ_ASSIGN_OR_RETURN(kvstore::Block block, store_->Get(key));
      out.slowest_tier = Slower(out.slowest_tier, block.served_from);
      out.bytes += block.bytes->size();
      out.segments.back().push_back(*block.bytes);
    }
  }
  out.seconds = Seconds(Clock::now() - t0);
  return out;
}

std::vector<KvBytes> SessionKvCache::Release(const std::string& session_id, bool keep_in_store) {
  std::vector<KvBytes> held = Bytes(session_id);
  std::vector<kvstore::BlockKey> all, unshared;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return {};
    for (const auto& seg : it->second.segments) {
      for (const StoredBlock& b : seg) {
        all.push_back(b.key);
        auto ref = refs_.find(b.key);
        if (ref != refs_.end() && --ref->second == 0) {
          unshared.push_back(b.key);
          refs_.erase(ref);
        }
      }
    }
    sessions_.erase(it);
  }
  if (all.empty()) return held;
  if (StatusOr<uint32_t> r = store_->Unpin(session_id, all); !r.ok()) {
    FZ_LOG_WARN("session '{}': unpinning KV failed: {}", SessionIdOfKey(session_id),
                MessageOf(r.status()));
  }
  if (!unshared.empty() && !keep_in_store) {
    if (StatusOr<uint32_t> r = store_->Delete(unshared); !r.ok()) {
      FZ_LOG_WARN("session '{}': deleting KV failed: {}", SessionIdOfKey(session_id),
                  MessageOf(r.status()));
    }
  }
  return held;
}

std::vector<KvBytes> SessionKvCache::Bytes(const std::string& session_id) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return {};
  std::vector<KvBytes> out;
  for (const auto& seg : it->second.segments) {
    for (const StoredBlock& b : seg) {
      auto at =
          std::find_if(out.begin(), out.end(), [&](const KvBytes& k) { return k.tier == b.tier; });
      if (at == out.end()) {
        out.push_back({b.tier, it->second.precision, 0});
        at = out.end() - 1;
      }
      at->bytes += b.bytes;
    }
  }
  return out;
}

StatusOr<FlushReport> SessionKvCache::Flush() {
  FlushReport report;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, s] : sessions_) {
      if (s.segments.empty()) continue;
      ++report.sessions;
      for (const auto& seg : s.segments) {
        for (const StoredBlock& b : seg) {
          ++report.blocks;
          report.bytes += b.bytes;
        }
      }
    }
  }
  if (embedded_ != nullptr) FZ_RETURN_IF_ERROR(embedded_->Flush());
  return report;
}

}  // namespace framezip::server
