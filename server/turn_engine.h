// The server's view of the engine: submit a turn, receive its text deltas and final stats through
// callbacks, cancel it, free a session's KV. The gRPC layer (server/video_chat_service.h,
// service_core.h) uses only this interface, so its tests run the real scheduler over a
// deterministic ModelBackend double (tests/integration/server_fake_model_backend.h).
//
// framezip-server runs BatchScheduler (server/batch_scheduler.h, continuous batching) over the
// real engine's EngineBackend, or UnavailableEngine without a model (server/engine_factory.h).
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "kvstore/store.h"
#include "server/turn_types.h"

namespace framezip::server {

// How a turn reports back. Both are called on an engine thread and must not block (the gRPC
// reactors only queue the data and start a write).
struct TurnCallbacks {
  // New text of the answer (valid UTF-8, possibly empty when a token ends mid-character is held
  // back) with the token ids that produced it. Never called after on_done.
  std::function<void(std::string text, std::vector<uint32_t> token_ids)> on_delta;
  // Called exactly once, last. OK: the turn finished (stop or length) and `stats` are complete.
  // Otherwise the turn failed or was cancelled: CANCELLED, DEADLINE_EXCEEDED,
  // RESOURCE_EXHAUSTED (KV budget), INVALID_ARGUMENT (prompt too long, bad media), UNAVAILABLE
  // (drain), INTERNAL; `stats` then holds what was measured so far.
  std::function<void(Status status, TurnStats stats)> on_done;
};

// Instantaneous load, for admission decisions, gauges and Drain.
struct EngineLoad {
  uint32_t running = 0;  // turns in the batch
  uint32_t waiting = 0;  // turns queued (being prepared or waiting for KV room)
  uint64_t kv_used_bytes = 0;
  uint64_t kv_capacity_bytes = 0;
};

// The session KV store as the engine sees it (the server reports it through its health service
// under its own name and in metrics, so a store that is down is visible while turns still run).
struct KvStoreHealth {
  bool configured = false;      // false: no store (kvstore none), nothing to report
  bool serving = true;          // reachable, every tier up, and the last commit succeeded
  bool tiers_up = true;         // reachable and every tier up (whatever the last commit did)
  std::string reason;           // why not, when not serving
  uint64_t commits = 0;         // segments committed since start
  uint64_t failed_commits = 0;  // commits the store refused or could not take
  // Sessions whose KV the store does not fully hold (KvDurability::kNotDurable): a pod that dies
  // now loses their cached KV (the sessions themselves survive; their next turn re-prefills).
  uint64_t sessions_not_durable = 0;
  // The commit queue (server/commit_queue.h): sessions waiting now, and since start the commits
  // deferred because it was full and those folded into one already waiting.
  uint64_t commit_queue_depth = 0;
  uint64_t commits_deferred = 0;
  uint64_t commits_coalesced = 0;
  // Since start: sessions found whose chain the store no longer held (restarted empty, flushed,
  // failed over, evicted); each is committed again as one full segment.
  uint64_t chains_lost = 0;
};

// Whether a session's KV would survive the loss of this replica (GetSession's kv_durability;
// values equal framezip.v1.KvDurability).
enum class KvDurability : uint8_t {
  kNoStore = 1,     // no KV store (kvstore none): the KV lives in this replica only
  kDurable = 2,     // the store holds the KV of every finished turn (or there is none yet)
  kPending = 3,     // the last turn's commit is queued or being written
  kNotDurable = 4,  // the store lacks some of it: a commit failed, or the store lost the
                    // session's blocks; the next commit writes them (a full segment when lost)
};

// A session's KV as committed to the shared KV store, enough for another replica to restore it:
// the blocks of each committed segment (keys and sizes) and how many conversation messages they
// cover. Published with each revision of the session (server/shared_sessions.h).
struct SharedKvState {
  struct Block {
    std::array<uint8_t, 32> key{};
    uint64_t bytes = 0;
  };
  uint64_t stored_messages = 0;
  KvPrecision precision = KvPrecision::kF16;
  std::vector<std::vector<Block>> segments;
};

// Thread-safe: every method may be called from any thread.
class TurnEngine {
 public:
  virtual ~TurnEngine() = default;

  virtual const ModelDescription& model() const = 0;

  // Queues a turn. An error return (RESOURCE_EXHAUSTED: wait queue full; UNAVAILABLE: draining;
  // INVALID_ARGUMENT: turn_id missing or reused) means no callback will ever run. OK means
  // `callbacks.on_done` runs exactly once, never from inside Submit.
  virtual Status Submit(TurnRequest request, TurnCallbacks callbacks) = 0;

  // Stops a turn within one engine step: on_done gets `reason` (CANCELLED or
  // DEADLINE_EXCEEDED, say) and the pages the turn allocated are freed. Unknown or finished ids
  // are ignored, so a reactor may call it unconditionally from OnCancel.
  virtual void Cancel(const std::string& turn_id, Status reason) = 0;

  // Frees the KV a session kept between turns (DeleteSession, TTL expiry); returns what was
  // freed, by tier and precision. A session with no KV returns an empty list.
  virtual std::vector<KvBytes> ReleaseSession(const std::string& session_id) = 0;

  // KV a session keeps now, by tier and precision, and the number of tokens it covers.
  virtual std::vector<KvBytes> SessionKv(const std::string& session_id) const = 0;
  virtual uint32_t SessionCachedTokens(const std::string& session_id) const = 0;
  // Whether the session's KV is in the store (by session key). Default: no store.
  virtual KvDurability SessionDurability(const std::string& /*session_key*/) const {
    return KvDurability::kNoStore;
  }

  virtual EngineLoad Load() const = 0;

  // Checks the session KV store (may call it: a remote store's round trip). Default: none.
  virtual KvStoreHealth StoreHealth() { return {}; }

  // Sessions shared between replicas through the KV store. ExportSharedKv: what the session has
  // committed to the store (empty when nothing, or no store). AdoptSharedKv: take a session
  // another replica committed (dropping this replica's stale copy of it); its next turn restores
  // the KV from the store. FAILED_PRECONDITION while a turn runs in the session here.
  virtual SharedKvState ExportSharedKv(const std::string& /*session_key*/) { return {}; }
  // Frees what this replica holds of a session (engine memory, its pins in the store) but leaves
  // the session's blocks in the store for the replicas that share it (a shared session's local
  // expiry). Default: ReleaseSession.
  virtual std::vector<KvBytes> ForgetSession(const std::string& session_key) {
    return ReleaseSession(session_key);
  }
  // The KV store sessions are committed to (shared session records go beside them), or null.
  virtual kvstore::KvStore* kv_store() { return nullptr; }
  virtual Status AdoptSharedKv(const std::string& /*session_key*/, const SharedKvState& /*kv*/) {
    return absl::OkStatus();
  }

  // Shutdown: refuses new turns (UNAVAILABLE), lets queued and running turns finish until
  // `deadline`, cancels the rest with UNAVAILABLE, then flushes the sessions' KV to the store.
  // Blocks until all that is done; idempotent.
  virtual void Drain(Clock::time_point deadline) = 0;
};

}  // namespace framezip::server
