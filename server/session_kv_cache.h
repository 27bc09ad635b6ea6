// SessionKvCache: each session's committed KV in the KV store (kvstore/), as the engine's page
// codec segments (engine/kv/page_codec.h) — one segment per committed turn, split into blocks.
//
// Keys are the kvstore hash chain (kvstore/block_key.h): a segment's first block is keyed by
// (previous segment's last key, model id, compression config, the turn's token ids, the content
// hashes of the turn's media); its further blocks chain on with no tokens. The chain starts from
// a root derived from the session's key (server/session_store.h: its id plus a 128-bit secret),
// so one session's blocks can never be computed or hit by another session, nor by a session
// re-created under the same id. (Blocks stay reference-counted, should a future caller share a
// root on purpose.) `session_id` below is that session key.
//
// Blocks are pinned for their session while it lives (store pins with a TTL; `pin_ttl`), and
// unpinned and deleted when it is released (DeleteSession, TTL expiry).
//
// Thread-safe: all methods, concurrently (the store is thread-safe; the bookkeeping has its own
// mutex, never held across a store call).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "kvstore/store.h"
#include "kvstore/tiered_store.h"
#include "server/turn_engine.h"
#include "server/turn_types.h"

namespace framezip::server {

struct SessionKvCacheOptions {
  std::string model_id;                 // part of every key
  std::chrono::seconds pin_ttl{86400};  // pins outlive any session TTL
  kvstore::Tier highest_tier = kvstore::Tier::kHost;
};

// What one session's segments came back as (Load).
struct LoadedSessionKv {
  std::vector<std::vector<std::string>> segments;     // blocks of segments 0..N
  double seconds = 0;                                 // store reads
  kvstore::Tier slowest_tier = kvstore::Tier::kHost;  // the lowest tier a block came from
  uint64_t bytes = 0;
};

struct FlushReport {
  uint64_t sessions = 0;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
};

class SessionKvCache {
 public:
  // `embedded` is `store` when it is an embedded TieredStore (Flush writes its host-only blocks to
  // disk), else nullptr.
  SessionKvCache(std::unique_ptr<kvstore::KvStore> store, kvstore::TieredStore* embedded,
                 SessionKvCacheOptions options);

  // Stores one segment of `session_id` (the next after those it committed). `tokens` are the ids
  // the segment covers and `media_hashes` the hashes of the media they show (both key the
  // segment); `compression_config` is the policy and page formats in force. `covered_messages`:
  // the conversation messages the session's segments cover once this one is in (SharedState
  // reports both together).
  Status CommitSegment(const std::string& session_id, std::vector<std::string> blocks,
                       std::span<const int32_t> tokens,
                       const std::vector<std::array<uint8_t, 32>>& media_hashes,
                       const std::string& compression_config, KvPrecision precision,
                       uint64_t covered_messages = 0);

  // Segments `session_id` committed (0 = none).
  size_t segments(const std::string& session_id) const;

  // Whether the store still holds every block of the session's committed segments: one Lookup
  // of the whole chain (a remote store's round trip). True when the session committed nothing.
  // False when the chain is broken, so a restore would fail and the next incremental segment would
  // hang off blocks that are gone: the store restarted empty, its Redis tier was flushed or failed
  // over, or blocks were evicted. UNAVAILABLE when the store cannot be reached.
  StatusOr<bool> ChainPresent(const std::string& session_id);

  // Every segment's blocks, in order. NOT_FOUND when the session has none or a block is gone
  // (evicted, corrupt); UNAVAILABLE when a remote store cannot be reached.
  StatusOr<LoadedSessionKv> Load(const std::string& session_id);

  // Unpins the session's blocks and deletes those no other session holds (all of them are left in
  // the store with `keep_in_store`: other replicas may still use a shared session's blocks);
  // returns what it held.
  std::vector<KvBytes> Release(const std::string& session_id, bool keep_in_store = false);

  // Bytes the session holds in the store, by tier (where each block was placed).
  std::vector<KvBytes> Bytes(const std::string& session_id) const;

  // Drain: makes every block durable where the store can (the embedded store's write-back blocks
  // go to disk) and reports what the sessions hold.
  StatusOr<FlushReport> Flush();

  kvstore::KvStore& store() { return *store_; }

  // A session committed by another replica (server/shared_sessions.h): its segments' blocks, in
  // order, replace this cache's bookkeeping of the session and are pinned for it here.
  void Adopt(const std::string& session_id, const SharedKvState& kv);
  // The session's segments' blocks and the messages they cover, for another replica to adopt: one
  // snapshot (a commit landing meanwhile is wholly in it or not at all).
  SharedKvState SharedState(const std::string& session_id) const;
  std::vector<std::vector<SharedKvState::Block>> SharedSegments(
      const std::string& session_id) const {
    return SharedState(session_id).segments;
  }

  // Asks the store for its stats (a remote store's round trip): serving unless it cannot be
  // reached, a tier is down, or the last commit failed (and none succeeded since).
  KvStoreHealth Health();

 private:
  struct StoredBlock {
    kvstore::BlockKey key;
    uint64_t bytes = 0;
    KvTier tier = KvTier::kHost;
  };
  struct SessionBlocks {
    std::vector<std::vector<StoredBlock>> segments;
    KvPrecision precision = KvPrecision::kF16;
    uint64_t covered_messages = 0;  // conversation messages the segments cover
  };

  std::unique_ptr<kvstore::KvStore> store_;
  kvstore::TieredStore* embedded_;
  const SessionKvCacheOptions options_;
  std::atomic<uint64_t> commits_{0};
  std::atomic<uint64_t> failed_commits_{0};
  std::atomic<bool> last_commit_failed_{false};
  mutable std::mutex mu_;
  std::map<std::string, SessionBlocks> sessions_;  // guarded by mu_
  std::map<kvstore::BlockKey, int> refs_;          // guarded by mu_
};

// Parses a 64-hex-digit SHA-256 (MediaInfo::content_hash); all zeros for anything else.
std::array<uint8_t, 32> MediaHashBytes(const std::string& hex);

}  // namespace framezip::server
