// KvStore: the interface every user of the KV block store programs against. Implemented by
// TieredStore (embedded: host RAM, disk, Redis tiers in this process) and RemoteStore
// (kvstore/service/remote_store.h: a shared framezip-kvstore over gRPC), so a server picks one
// at start-up and the rest of its code does not care which.
//
// Blocks are immutable and content-addressed: a key is the hash chain of the block's content
// (block_key.h), so putting a key twice keeps one copy and a reader never sees a different value
// under the same key.
//
// Thread-safety: every method of every implementation may be called from any thread concurrently.
//
// Errors (absl codes, mapped 1:1 to gRPC codes by the service):
//   NOT_FOUND           Get of a key in no tier, or whose only copy failed its CRC (never served).
//   RESOURCE_EXHAUSTED  Put of a block larger than the max block size, or that no tier could take.
//   INVALID_ARGUMENT    bad arguments (message says which).
//   UNAVAILABLE         the remote store cannot be reached.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "kvstore/block_key.h"
#include "kvstore/types.h"

namespace framezip::kvstore {

struct PutOptions {
  // Highest tier to write to; the store may place the block lower when that tier is full.
  Tier highest_tier = Tier::kHost;
  // Precision of the pages inside, for accounting only.
  Precision precision = Precision::kUnspecified;
  // Redis TTL for this block; 0 = the store's default.
  uint32_t redis_ttl_seconds = 0;
  // Pin the block for this session on arrival (empty = no pin).
  std::string pin_session_id = {};
};

struct PutResult {
  bool already_present = false;  // the key was stored already; nothing was written
  std::vector<Tier> tiers;       // tiers that hold the block now
  bool durable = false;          // on disk and fsynced when Put returned
};

struct GetOptions {
  bool promote = true;  // copy a lower-tier hit up to the host tier
};

struct LookupOptions {
  std::string pin_session_id = {};  // pin the found blocks for this session
  bool prefetch = false;       // start copying the found blocks up to the host tier
};

struct LookupResult {
  uint32_t present_prefix = 0;  // keys[0, present_prefix) are all present
  std::vector<Tier> tiers;      // tier of each present key
  uint64_t present_bytes = 0;
};

class KvStore {
 public:
  virtual ~KvStore() = default;

  // Stores `bytes` under `key`. See PutResult for what is reported.
  virtual StatusOr<PutResult> Put(const BlockKey& key, std::string bytes,
                                  const PutOptions& options = {}) = 0;

  // The block, from the highest tier that holds an intact copy.
  virtual StatusOr<Block> Get(const BlockKey& key, const GetOptions& options = {}) = 0;

  // The longest run of keys, from the first, that the store holds, and where.
  virtual StatusOr<LookupResult> Lookup(std::span<const BlockKey> keys,
                                        const LookupOptions& options = {}) = 0;

  // Deletes keys from every tier; returns how many were present (absent keys are ignored).
  virtual StatusOr<uint32_t> Delete(std::span<const BlockKey> keys) = 0;

  // Pins keep present blocks from eviction until unpinned or `ttl` passes (0 = store default).
  // Returns how many keys are pinned (present) after the call.
  virtual StatusOr<uint32_t> Pin(const std::string& session_id, std::span<const BlockKey> keys,
                                 std::chrono::seconds ttl = std::chrono::seconds(0)) = 0;
  // Removes this session's pins on `keys`; returns how many pins were removed.
  virtual StatusOr<uint32_t> Unpin(const std::string& session_id,
                                   std::span<const BlockKey> keys) = 0;

  virtual StatusOr<StoreStats> Stats() = 0;
};

}  // namespace framezip::kvstore
