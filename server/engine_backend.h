// EngineBackend: the ModelBackend over engine/runtime's Engine facade (the real model), driven by
// BatchScheduler. Each session owns an engine Conversation that keeps its KV between turns, so
// turn N+1 feeds the engine only its new user message.
//
// Mapping onto the scheduler's step model: Prepare (worker pool) decodes and preprocesses the
// new messages' media with media/; the turn's one "prefill" item runs Engine::StartTurn (render,
// tokenize, vision encode, prefill, first token) on the step thread; decode items of all running
// turns go through one batched Engine::Step. The engine reports the turn's token counts, which
// replace the scheduler's estimates in the stats (BackendSequence::ReportStats).
//
// A cancelled or failed turn leaves its conversation with a partial reply the session never
// recorded, so the conversation is dropped and the session's next turn re-prefills its history.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "server/config.h"
#include "server/model_backend.h"

namespace framezip::engine::runtime {
class Engine;
class Conversation;
}  // namespace framezip::engine::runtime

namespace framezip::server {

class EngineBackend final : public ModelBackend {
 public:
  // Loads config.model_dir (NOT_FOUND / INVALID_ARGUMENT naming the file or tensor).
  static StatusOr<std::unique_ptr<EngineBackend>> Load(const ServerConfig& config);
  ~EngineBackend() override;

  const ModelDescription& model() const override { return model_; }
  StatusOr<PreparedTurn> Prepare(const TurnRequest& request) override;
  Status Step(std::span<StepItem> batch) override;
  Status Commit(const std::string& session_id, BackendSequence& sequence) override;
  std::vector<KvBytes> ReleaseSession(const std::string& session_id) override;
  std::vector<KvBytes> SessionKv(const std::string& session_id) const override;
  uint32_t SessionCachedTokens(const std::string& session_id) const override;
  uint64_t KvUsedBytes() const override;
  uint64_t KvCapacityBytes() const override { return kv_capacity_bytes_; }
  Status FlushSessions() override;

 private:
  class Sequence;
  struct SessionState {
    std::unique_ptr<engine::runtime::Conversation> conversation;
    size_t messages_fed = 0;  // conversation messages already in the KV (reply included)
    uint64_t kv_bytes = 0;    // as of the last commit
    uint32_t cached_tokens = 0;
  };
  EngineBackend() = default;
  // Drops a session's conversation after a failed turn (step thread or prepare pool).
  void DropConversation(const std::string& session_id, engine::runtime::Conversation* expected);
  KvPrecision Precision() const;

  std::unique_ptr<engine::runtime::Engine> engine_;
  ModelDescription model_;
  uint64_t kv_capacity_bytes_ = 0;
  uint64_t kv_bytes_per_token_ = 0;
  mutable std::mutex mu_;
  std::map<std::string, SessionState> sessions_;  // guarded by mu_
};

}  // namespace framezip::server
