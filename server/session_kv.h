// SessionKv: the life of every session's KV on one replica, with the one map of sessions. Each
// session owns an engine Conversation that keeps its KV between turns (so turn N+1 feeds the
// engine only its new message), and its segments in the KV store (server/session_kv_cache.h):
//
// - Attach (a turn's Prepare): the session's conversation, restored from the store when it was
//   evicted (load -> decode -> restore, its pages reserved first), or a new one.
// - KeepTurn / EndTurn (a finished turn): the conversation is kept; when the turn lets go of it
//   the session joins the CommitQueue (server/commit_queue.h), whose one worker exports the new
//   pages with the page codec (holding the session only while it reads the conversation: a turn
//   that starts meanwhile waits in Attach for that export, never for the store) and commits them.
//   A full queue defers the commit to the session's next one or Flush; a session whose next turn
//   starts before its commit ran is committed with that turn (coalesced). The step thread never
//   waits for the store.
// - DropConversation (a failed or cancelled turn): the partial reply is dropped; the next turn
//   restores the last committed state from the store (or re-prefills its history).
// - EvictIdle: when a turn does not fit the KV budget, idle sessions whose KV the store holds
//   whole are dropped from engine memory, least recently used first.
// - ExportShared / AdoptShared: a session another replica committed (server/shared_sessions.h).
// - Durability after store loss: before a session's next segment is committed, the store is asked
//   whether it still holds the session's chain; when it does not (framezip-kvstore restarted
//   empty, its Redis flushed or failed over, blocks evicted) the session starts its chain over
//   with one full segment of its whole conversation, so one commit makes it durable again. Health
//   (housekeeping) checks idle sessions' chains the same way, a bounded number per call, commits
//   the idle ones it finds lost again at once (through the commit queue), and counts the sessions
//   whose KV the store does not hold (KvStoreHealth::sessions_not_durable) and those found lost
//   (KvStoreHealth::chains_lost).
// - Flush (drain): the queue, then every session still behind the store.
//
// Without a store (config kvstore "none") only the conversations are kept.
//
// Thread-safe: every method, from any thread (Prepare pool, step thread, gRPC and housekeeping
// threads, the commit worker). Never calls the store with its lock held.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/kv/page_codec.h"
#include "engine/kv/sequence_kv.h"
#include "server/commit_queue.h"
#include "server/config.h"
#include "server/model_backend.h"
#include "server/session_kv_cache.h"

namespace framezip::engine::runtime {
class Engine;
class Conversation;
struct RestoredConversation;
}  // namespace framezip::engine::runtime

namespace framezip::server {

class SessionKv {
 public:
  // The store config `kvstore` names ("embedded", "none", or a framezip-kvstore address), keyed
  // by `model_id`; `engine` must outlive this.
  static StatusOr<std::unique_ptr<SessionKv>> Open(const ServerConfig& config,
                                                   const std::string& model_id,
                                                   engine::runtime::Engine* engine);
  // `cache` may be null (no store).
  SessionKv(engine::runtime::Engine* engine, std::unique_ptr<SessionKvCache> cache,
            size_t commit_queue_capacity);
  ~SessionKv();  // stops the commit worker, then frees the conversations

  // A turn's hold on its session: the conversation to run on, the first message its KV does not
  // hold yet, and the KV bytes it holds now. FAILED_PRECONDITION when a turn holds the session
  // already; a restore's errors (RESOURCE_EXHAUSTED: no KV room in time, CANCELLED). On success
  // the turn holds the session until EndTurn; on an error it does not.
  struct Attached {
    engine::runtime::Conversation* conversation = nullptr;
    size_t first_new = 0;
    uint64_t kv_bytes = 0;
  };
  StatusOr<Attached> Attach(const TurnRequest& request, KvReservations& kv, PreparedTurn& turn);
  // The turn on `conversation` finished: keep it as the session's cache (step thread).
  // FAILED_PRECONDITION when the session was released during the turn.
  Status KeepTurn(const std::string& session_key, const engine::runtime::Conversation& conversation,
                  size_t messages_total, const std::vector<std::array<uint8_t, 32>>& media_hashes);
  // The end of a turn's hold (whatever its outcome); queues the commit of a kept turn.
  void EndTurn(const std::string& session_key);
  // Drops the session's conversation after a failed turn, if it is still `expected`.
  void DropConversation(const std::string& session_key, engine::runtime::Conversation* expected);

  // TurnEngine's session calls (by session key).
  std::vector<KvBytes> ReleaseSession(const std::string& session_key);
  std::vector<KvBytes> ForgetSession(const std::string& session_key);
  std::vector<KvBytes> Bytes(const std::string& session_key) const;
  uint32_t CachedTokens(const std::string& session_key) const;
  KvDurability Durability(const std::string& session_key) const;
  SharedKvState ExportShared(const std::string& session_key);
  Status AdoptShared(const std::string& session_key, const SharedKvState& kv);
  uint64_t EvictIdle(uint64_t bytes);
  // Commits queued or in flight.
  bool CommitsPending() const { return commit_queue_ != nullptr && !commit_queue_->Idle(); }
  Status Flush();
  KvStoreHealth Health();
  kvstore::KvStore* store() { return kv_cache_ ? &kv_cache_->store() : nullptr; }
  // The session KV store; nullptr without one.
  SessionKvCache* cache() { return kv_cache_.get(); }

  static KvPrecision Precision();

 private:
  struct SessionState {
    std::unique_ptr<engine::runtime::Conversation> conversation;  // null when evicted
    size_t messages_fed = 0;  // conversation messages already in the KV (reply included)
    uint64_t kv_bytes = 0;    // as of the last commit
    // kv_bytes by page format as of the last kept turn (all zero when unknown: a restored
    // conversation). A copy: the conversation itself belongs to the step thread while it runs.
    engine::kv::KvBytesByFormat kv_bytes_by_format{};
    uint32_t cached_tokens = 0;
    bool busy = false;             // a turn is being prepared or run on it
    bool released = false;         // released while busy: freed when the turn ends
    bool store_current = false;    // the store holds everything the conversation does
    bool commit_wanted = false;    // a turn finished: queue its commit when it lets go (EndTurn)
    bool exporting = false;        // the commit worker reads the conversation (Attach waits)
    uint64_t finished_turns = 0;   // turns kept: a commit begun before one is stale
    size_t stored_messages = 0;    // messages_fed as of the store's last segment
    engine::kv::SegmentMark mark;  // where the next segment for the store starts
    std::vector<std::array<uint8_t, 32>> pending_media;    // media of turns not yet in the store
    std::vector<std::array<uint8_t, 32>> committed_media;  // media of the segments in the store
    bool chain_lost = false;    // the store lost the session's segments: the next commit is full
    uint64_t chain_serial = 0;  // changes of its chain in the store (a check spanning one is stale)
    Clock::time_point chain_checked;  // the last check of its chain in the store
    Clock::time_point last_used;
  };
  struct RestoredSession {
    std::unique_ptr<engine::runtime::Conversation> conversation;  // null: start over
    engine::kv::SegmentMark mark;
  };
  // With mu_ held.
  KvDurability DurabilityOf(const std::string& session_key, const SessionState& state) const;
  StatusOr<RestoredSession> RestoreEvicted(const TurnRequest& request, KvReservations& kv,
                                           PreparedTurn& turn);
  // A conversation rebuilt from the session's segments in the store, its pages reserved through
  // `kv` first (waiting for room up to the turn's deadline).
  StatusOr<engine::runtime::RestoredConversation> RestoreFromStore(const TurnRequest& request,
                                                                   KvReservations& kv,
                                                                   double* seconds, KvTier* tier);
  Status ReserveForRestore(const TurnRequest& request, KvReservations& kv, uint64_t bytes);
  // ReleaseSession, leaving the store's blocks when `keep_in_store`.
  std::vector<KvBytes> Release(const std::string& session_key, bool keep_in_store);
  // Exports what the session's conversation added since its mark and commits it to the store (the
  // commit worker; Flush once the queue is empty). Nothing to do when the store is current, the
  // session is gone, or a turn runs on it (that turn's commit will cover this one).
  Status CommitToStore(const std::string& session_key);
  // The commit worker's job: CommitToStore, a failure logged.
  void RunQueuedCommit(const std::string& session_key);
  // The session's chain in the store is gone: its next segment is the whole conversation, segment
  // 0 of a new chain (mu_ held; the caller releases the old chain's blocks).
  static void StartChainOver(SessionState& state);
  // Health's check of idle sessions' chains (at most kChainChecksPerCall sessions, those checked
  // longest ago first); marks the ones the store lost, then, when the store is up (reachable,
  // every tier available), RecommitLostChains.
  void CheckChains(bool store_up);
  // Every idle session whose chain is lost, committed again as one full segment (through the
  // commit queue when there is one), so it is durable again without waiting for its next turn.
  void RecommitLostChains();
  std::string CompressionConfig(const engine::runtime::Conversation& conversation) const;

  engine::runtime::Engine* const engine_;
  mutable std::mutex mu_;
  std::map<std::string, SessionState> sessions_;  // guarded by mu_
  std::atomic<uint64_t> chains_lost_{0};          // sessions found whose chain was lost
  std::condition_variable export_cv_;             // some session's `exporting` ended
  std::unique_ptr<SessionKvCache> kv_cache_;
  size_t kv_max_block_bytes_ = size_t{4} << 20;
  std::unique_ptr<CommitQueue> commit_queue_;  // with kv_cache_; stopped first
};

}  // namespace framezip::server
