// The Redis tier: blocks shared between replicas through a Redis server (hiredis, synchronous).
//
// Layout under `key_prefix` (default "fzkv:"), every key with the block's TTL:
//   <prefix><hex key>        meta: "FZKV1 <size> <crc32c> <chunks> <precision>"
//   <prefix><hex key>:<i>    chunk i of the bytes, at most chunk_bytes each
// A Put writes chunks then meta in one MULTI/EXEC, so a reader that sees meta sees all chunks
// (until the TTL removes them all). A Get checks size and CRC32C; a value that fails is deleted,
// counted as corrupt and reported NOT_FOUND. Blocks that expire are simply misses.
//
// Availability: when Redis cannot be reached every call fails fast with UNAVAILABLE ("redis
// tier unavailable: ...") and the tier reconnects in the background of later calls, with
// exponential backoff (backoff_initial doubling to backoff_max). The tiered store keeps serving
// from its other tiers meanwhile.
//
// Thread-safe: a small pool of connections, each used by one call at a time.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kvstore/metrics.h"
#include "kvstore/types.h"

namespace framezip::kvstore {

struct RedisTierOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string key_prefix = "fzkv:";
  uint32_t default_ttl_seconds = 3600;
  uint64_t chunk_bytes = 512 << 10;
  int connections = 4;
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds command_timeout{2000};
  std::chrono::milliseconds backoff_initial{50};
  std::chrono::milliseconds backoff_max{2000};
};

// Parses "host:port" (host defaults to 127.0.0.1 when only ":port" or "port" is given).
Status ParseRedisAddress(std::string_view address, RedisTierOptions* options);

class RedisTier {
 public:
  RedisTier(RedisTierOptions options, StoreMetrics* metrics);
  ~RedisTier();
  RedisTier(const RedisTier&) = delete;
  RedisTier& operator=(const RedisTier&) = delete;

  // Stores the block with `ttl_seconds` (0 = default TTL). UNAVAILABLE when Redis is down.
  Status Put(const BlockKey& key, std::string_view bytes, uint32_t crc32c, Precision precision,
             uint32_t ttl_seconds);
  // NOT_FOUND when absent, expired or corrupt; UNAVAILABLE when Redis is down. Counts hit/miss.
  StatusOr<Block> Get(const BlockKey& key);
  // Size of each key's block, nullopt when absent; one round trip for all keys.
  StatusOr<std::vector<std::optional<uint64_t>>> SizesOf(std::span<const BlockKey> keys);
  // True when the key was present.
  StatusOr<bool> Erase(const BlockKey& key);
  // Seconds left to live, nullopt when absent (for tests and tools).
  StatusOr<std::optional<int64_t>> TtlOf(const BlockKey& key);

  // Whether the last attempt to talk to Redis worked.
  bool available() const;
  TierStats Stats() const;

 private:
  class Connection;
  // A connected connection from the pool, or UNAVAILABLE (while backing off, or connect failed).
  StatusOr<std::unique_ptr<Connection>> Acquire();
  void Release(std::unique_ptr<Connection> connection, bool healthy);
  Status Unavailable(const std::string& why);
  std::string MetaKey(const BlockKey& key) const;

  const RedisTierOptions options_;
  StoreMetrics* metrics_;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;
  bool available_ = true;
  std::string last_error_;
  std::chrono::steady_clock::time_point next_attempt_{};
  std::chrono::milliseconds backoff_;
  uint64_t bytes_ = 0, blocks_ = 0;
  uint64_t hits_ = 0, misses_ = 0, corrupt_ = 0, write_failures_ = 0;
};

}  // namespace framezip::kvstore
