// EngineBackend: the ModelBackend over engine/runtime's Engine facade (the real model), driven by
// BatchScheduler. Each session owns an engine Conversation that keeps its KV between turns, so
// turn N+1 feeds the engine only its new user message.
//
// Mapping onto the scheduler's step model: Prepare (worker pool) decodes and preprocesses the
// new messages' media with media/, then Engine::PrepareTurn renders, tokenizes and runs the
// vision tower, so the scheduler knows the exact prompt tokens to prefill. Each step (step
// thread) is ONE Engine::MixedStep: the prefill chunks the scheduler chose (at most
// prefill_chunk_tokens per turn, step_token_budget in all) fused with the decode tokens of all
// running turns, the weights read once; a turn's first token is sampled with its last chunk. The
// engine's exact stats replace the scheduler's figures (BackendSequence::ReportStats).
//
// A cancelled or failed turn leaves its conversation with a partial reply the session never
// recorded, so the conversation is dropped and the session's next turn restores the last
// committed state from the KV store (or re-prefills its history when the store has none).
//
// Session KV in the store (server/session_kv_cache.h): after every turn the conversation's new
// pages are exported with the engine's page codec and committed to the KV store (the embedded
// TieredStore by default, or a framezip-kvstore by address: config `kvstore`), pinned while the
// session lives. When a turn does not fit the engine's KV budget, idle sessions whose KV is in the
// store are evicted from engine memory (EvictIdleSessions, least recently used first); their next
// turn restores the cached prefix from the store and prefills only the new text. Drain
// (FlushSessions) commits whatever is not in the store yet and makes the store durable.
//
// Commits never run on the step thread: Commit only marks the session, and when the turn lets go
// of it (EndTurn) the session joins the CommitQueue (server/commit_queue.h), whose one worker
// exports the new pages (holding the session only while it reads the conversation: a turn that
// starts meanwhile waits in Prepare for that export, never for the store) and writes them to the
// store. A full queue defers the commit to the session's next one or the drain; a session whose
// next turn starts before its commit ran is committed with that turn (coalesced).
//
// Durability after store loss: before a session's next segment is committed, the store is asked
// whether it still holds the session's chain (SessionKvCache::ChainPresent); when it does not
// (framezip-kvstore restarted empty, its Redis flushed or failed over, blocks evicted) the
// session starts its chain over with one full segment of its whole conversation, so one commit
// makes it durable again. StoreHealth (housekeeping) checks idle sessions' chains the same way, a
// bounded number per call, so sessions the store lost are counted (KvStoreHealth::
// sessions_not_durable, SessionDurability) and logged before their next turn.
#pragma once

#include <array>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/kv/page_codec.h"
#include "media/media_backend.h"
#include "server/commit_queue.h"
#include "server/config.h"
#include "server/model_backend.h"
#include "server/session_kv_cache.h"

namespace framezip::engine::runtime {
class Engine;
class Conversation;
struct RestoredConversation;
struct TurnOptions;
}  // namespace framezip::engine::runtime

namespace framezip::server {

class EngineBackend final : public ModelBackend {
 public:
  // Loads config.model_dir (NOT_FOUND / INVALID_ARGUMENT naming the file or tensor).
  // `media` decodes the turns' media (shared with the server's upload validation).
  static StatusOr<std::unique_ptr<EngineBackend>> Load(const ServerConfig& config,
                                                       std::shared_ptr<media::MediaBackend> media);
  ~EngineBackend() override;

  const ModelDescription& model() const override { return model_; }
  StatusOr<PreparedTurn> Prepare(const TurnRequest& request, KvReservations& kv) override;
  Status Step(std::span<StepItem> batch) override;
  Status Commit(const std::string& session_key, BackendSequence& sequence) override;
  std::vector<KvBytes> ReleaseSession(const std::string& session_key) override;
  std::vector<KvBytes> SessionKv(const std::string& session_key) const override;
  uint32_t SessionCachedTokens(const std::string& session_key) const override;
  KvDurability SessionDurability(const std::string& session_key) const override;
  uint64_t KvUsedBytes() const override;
  uint64_t KvCapacityBytes() const override { return kv_capacity_bytes_; }
  Status FlushSessions() override;
  KvStoreHealth StoreHealth() override;
  SharedKvState ExportSharedKv(const std::string& session_key) override;
  std::vector<KvBytes> ForgetSession(const std::string& session_key) override;
  kvstore::KvStore* kv_store() override { return kv_cache_ ? &kv_cache_->store() : nullptr; }
  Status AdoptSharedKv(const std::string& session_key, const SharedKvState& kv) override;
  uint64_t EvictIdleSessions(uint64_t bytes) override;

  // The session KV store; nullptr when config `kvstore` is "none".
  SessionKvCache* kv_cache() { return kv_cache_.get(); }

 private:
  class Sequence;
  struct SessionState {
    std::unique_ptr<engine::runtime::Conversation> conversation;  // null when evicted
    size_t messages_fed = 0;  // conversation messages already in the KV (reply included)
    uint64_t kv_bytes = 0;    // as of the last commit
    uint32_t cached_tokens = 0;
    bool busy = false;             // a turn is being prepared or run on it
    bool released = false;         // released while busy: freed when the turn ends
    bool store_current = false;    // the store holds everything the conversation does
    bool commit_wanted = false;    // a turn finished: queue its commit when it lets go (EndTurn)
    bool exporting = false;        // the commit worker reads the conversation (Prepare waits)
    uint64_t finished_turns = 0;   // turns kept (Commit): a commit begun before one is stale
    size_t stored_messages = 0;    // messages_fed as of the store's last segment
    engine::kv::SegmentMark mark;  // where the next segment for the store starts
    std::vector<std::array<uint8_t, 32>> pending_media;    // media of turns not yet in the store
    std::vector<std::array<uint8_t, 32>> committed_media;  // media of the segments in the store
    bool chain_lost = false;    // the store lost the session's segments: the next commit is full
    uint64_t chain_serial = 0;  // changes of its chain in the store (a check spanning one is stale)
    Clock::time_point chain_checked;  // the last check of its chain in the store
    Clock::time_point last_used;
  };
  // With mu_ held.
  KvDurability DurabilityOf(const std::string& session_key, const SessionState& state) const;
  EngineBackend() = default;
  // Prepare's steps. AttachConversation marks the session busy and gives the turn its
  // conversation (the session's, restored from the store when evicted, or a new one); returns
  // the index of the first message the KV does not hold yet.
  StatusOr<size_t> AttachConversation(const TurnRequest& request, KvReservations& kv, Sequence& seq,
                                      PreparedTurn& turn);
  struct RestoredSession {
    std::unique_ptr<engine::runtime::Conversation> conversation;  // null: start over
    engine::kv::SegmentMark mark;
  };
  StatusOr<RestoredSession> RestoreEvicted(const TurnRequest& request, KvReservations& kv,
                                           PreparedTurn& turn);
  // Decodes (in the media workers) and preprocesses the media of messages [first_new, end).
  Status DecodeNewMedia(const TurnRequest& request, size_t first_new, Sequence& seq,
                        PreparedTurn& turn);
  static engine::runtime::TurnOptions TurnOptionsFor(const SamplingSpec& sampling);
  // Prompt/cached tokens, max_new_tokens within the context, and the KV the turn may add.
  void FillAdmission(const engine::runtime::Conversation& conversation,
                     const SamplingSpec& sampling, PreparedTurn& turn) const;
  // Drops a session's conversation after a failed turn (step thread or prepare pool).
  void DropConversation(const std::string& session_key, engine::runtime::Conversation* expected);
  // The end of a turn's hold on its session (every turn, whatever its outcome).
  void EndTurn(const std::string& session_key);
  // ReleaseSession, leaving the store's blocks when `keep_in_store`.
  std::vector<KvBytes> Release(const std::string& session_key, bool keep_in_store);
  // A conversation rebuilt from the session's segments in the store, its pages reserved through
  // `kv` first (waiting for room up to the turn's deadline).
  StatusOr<engine::runtime::RestoredConversation> RestoreFromStore(const TurnRequest& request,
                                                                   KvReservations& kv,
                                                                   double* seconds, KvTier* tier);
  Status ReserveForRestore(const TurnRequest& request, KvReservations& kv, uint64_t bytes);
  // Exports what the session's conversation added since its mark and commits it to the store (the
  // commit worker; the drain once the queue is empty). Nothing to do when the store is current,
  // the session is gone, or a turn runs on it (that turn's commit will cover this one).
  Status CommitToStore(const std::string& session_key);
  // The commit worker's job: CommitToStore, a failure logged.
  void RunQueuedCommit(const std::string& session_key);
  // The session's chain in the store is gone: its next segment is the whole conversation, segment
  // 0 of a new chain (mu_ held; the caller releases the old chain's blocks).
  static void StartChainOver(SessionState& state);
  // StoreHealth's check of idle sessions' chains (at most kChainChecksPerCall sessions, those
  // checked longest ago first); marks the ones the store lost.
  void CheckChains();
  KvPrecision Precision() const;
  std::string CompressionConfig(const engine::runtime::Conversation& conversation) const;

  std::shared_ptr<media::MediaBackend> media_;
  media::MediaLimits media_limits_;
  std::unique_ptr<engine::runtime::Engine> engine_;
  ModelDescription model_;
  uint64_t kv_capacity_bytes_ = 0;
  int64_t prefill_chunk_tokens_ = 0;
  mutable std::mutex mu_;
  std::map<std::string, SessionState> sessions_;  // guarded by mu_
  std::condition_variable export_cv_;             // some session's `exporting` ended
  std::unique_ptr<SessionKvCache> kv_cache_;
  size_t kv_max_block_bytes_ = size_t{4} << 20;
  std::unique_ptr<CommitQueue> commit_queue_;  // with kv_cache_; stopped first
};

}  // namespace framezip::server
