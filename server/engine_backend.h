// EngineBackend: the ModelBackend over engine/runtime's Engine facade (the real model), driven by
// BatchScheduler: a Prepare/Step adapter. The sessions, their conversations and their KV's life
// (commit to the store off the step thread, restore, eviction, adoption, durability after store
// loss) are SessionKv's (server/session_kv.h); this class turns a scheduler turn into engine work.
//
// Mapping onto the scheduler's step model: Prepare (worker pool) attaches the session's
// conversation (SessionKv::Attach: restored from the store when evicted), decodes and
// preprocesses the new messages' media with media/, then Engine::PrepareTurn renders, tokenizes
// and runs the vision tower, so the scheduler knows the exact prompt tokens to prefill. Each step
// (step thread) is ONE Engine::MixedStep: the prefill chunks the scheduler chose (at most
// prefill_chunk_tokens per turn, step_token_budget in all) fused with the decode tokens of all
// running turns, the weights read once; a turn's first token is sampled with its last chunk. The
// engine's exact stats replace the scheduler's figures (BackendSequence::ReportStats). Commit
// hands the finished turn to SessionKv (KeepTurn): nothing on the step thread waits for the store.
//
// A cancelled or failed turn leaves its conversation with a partial reply the session never
// recorded, so the conversation is dropped and the session's next turn restores the last
// committed state from the KV store (or re-prefills its history when the store has none).
#pragma once

#include <array>
#include <memory>
#include <string>

#include "media/media_backend.h"
#include "server/config.h"
#include "server/model_backend.h"
#include "server/session_kv.h"

namespace framezip::engine::runtime {
class Engine;
class Conversation;
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
  uint64_t KvUsedBytes() const override;
  uint64_t KvCapacityBytes() const override { return model_.kv_budget_bytes; }

  // The sessions' calls go to SessionKv.
  std::vector<KvBytes> ReleaseSession(const std::string& key) override {
    return sessions_->ReleaseSession(key);
  }
  std::vector<KvBytes> SessionKv(const std::string& key) const override {
    return sessions_->Bytes(key);
  }
  uint32_t SessionCachedTokens(const std::string& key) const override {
    return sessions_->CachedTokens(key);
  }
  KvDurability SessionDurability(const std::string& key) const override {
    return sessions_->Durability(key);
  }
  Status FlushSessions() override { return sessions_->Flush(); }
  KvStoreHealth StoreHealth() override { return sessions_->Health(); }
  SharedKvState ExportSharedKv(const std::string& key) override {
    return sessions_->ExportShared(key);
  }
  std::vector<KvBytes> ForgetSession(const std::string& key) override {
    return sessions_->ForgetSession(key);
  }
  kvstore::KvStore* kv_store() override { return sessions_->store(); }
  Status AdoptSharedKv(const std::string& key, const SharedKvState& kv) override {
    return sessions_->AdoptShared(key, kv);
  }
  uint64_t EvictIdleSessions(uint64_t bytes) override { return sessions_->EvictIdle(bytes); }
  bool KvCommitsPending() const override { return sessions_->CommitsPending(); }

  // The session KV store; nullptr when config `kvstore` is "none".
  SessionKvCache* kv_cache() { return sessions_->cache(); }

 private:
  class Sequence;
  EngineBackend() = default;
  // Decodes (in the media workers) and preprocesses the media of messages [first_new, end).
  Status DecodeNewMedia(const TurnRequest& request, size_t first_new, Sequence& seq,
                        PreparedTurn& turn);
  static engine::runtime::TurnOptions TurnOptionsFor(const SamplingSpec& sampling);
  // Prompt/cached tokens, max_new_tokens within the context, and the KV the turn may add.
  void FillAdmission(const engine::runtime::Conversation& conversation,
                     const SamplingSpec& sampling, PreparedTurn& turn) const;

  std::shared_ptr<media::MediaBackend> media_;
  media::MediaLimits media_limits_;
  std::unique_ptr<engine::runtime::Engine> engine_;
  ModelDescription model_;
  int64_t prefill_chunk_tokens_ = 0;
  // (Qualified: SessionKv is also ModelBackend's method.) Reset before engine_ (~EngineBackend).
  std::unique_ptr<server::SessionKv> sessions_;
};

}  // namespace framezip::server
