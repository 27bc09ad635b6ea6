// Vocabulary shared by the store, its tiers and its clients: tiers, precision hints, blocks and
// per-tier statistics. Plain value types; no locking needed.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/block_key.h"

namespace framezip::kvstore {

// Values equal framezip.v1.KvTier so the service converts by cast (checked in proto_convert.cc).
enum class Tier : uint8_t { kHost = 2, kDisk = 3, kRedis = 4, kRemote = 5 };

// Values equal framezip.v1.KvPrecision. The store never decodes a block; precision is a hint the
// caller gives at Put for accounting (bytes per tier and precision).
enum class Precision : uint8_t {
  kUnspecified = 0,
  kF32 = 1,
  kF16 = 2,
  kBf16 = 3,
  kInt8 = 4,
  kInt4 = 5,
  kInt2 = 6,
  kLowRank = 7,
};
inline constexpr int kNumPrecisions = 8;

// "host", "disk", "redis", "remote" (metric labels, logs).
std::string_view TierName(Tier tier);
// "unspecified", "f32", "f16", "bf16", "int8", "int4", "int2", "low_rank".
std::string_view PrecisionName(Precision precision);

// Immutable block bytes, shared between tiers and readers without copying.
using BlockBytes = std::shared_ptr<const std::string>;

struct BlockKeyHash {
  size_t operator()(const BlockKey& key) const {
    size_t h;  // keys are SHA-256 outputs: any 8 bytes are a good hash
    static_assert(sizeof(h) <= sizeof(BlockKey));
    __builtin_memcpy(&h, key.data(), sizeof(h));
    return h;
  }
};

// A block as a reader gets it.
struct Block {
  BlockBytes bytes;
  uint32_t crc32c = 0;  // CRC32C of *bytes, verified by the tier that served it
  Precision precision = Precision::kUnspecified;
  Tier served_from = Tier::kHost;
};

struct PrecisionBytes {
  Precision precision;
  uint64_t bytes;
  uint64_t blocks;
};

struct TierStats {
  Tier tier = Tier::kHost;
  bool available = true;  // false when configured but down (Redis unreachable)
  uint64_t bytes = 0;     // for Redis: bytes this process wrote and has not deleted (TTL unseen)
  uint64_t capacity_bytes = 0;
  uint64_t blocks = 0;
  uint64_t pinned_blocks = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t promotions = 0;  // blocks copied up from this tier to the host tier
  uint64_t corrupt_blocks = 0;
  uint64_t write_failures = 0;
  std::vector<PrecisionBytes> bytes_by_precision;  // only precisions with blocks
};

struct StoreStats {
  std::vector<TierStats> tiers;  // configured tiers, host first
};

}  // namespace framezip::kvstore
