// BatchScheduler: the TurnEngine the server ships. Continuous batching over a ModelBackend.
//
// A turn goes through three stages:
//   1. preparing  — on the prepare pool: ModelBackend::Prepare (tokenize, media, cached prefix).
//   2. waiting    — in a FIFO until its predicted KV bytes fit the budget and the batch has room.
//   3. running    — in the batch. Each engine step (one thread, the step loop) takes one decode
//                   token of every running turn that finished its prefill, then prefill chunks of
//                   the others, oldest first, until `step_token_budget` tokens; so a long video
//                   prefill never stalls the decoding turns for more than one chunk.
// Preparing + waiting turns are bounded by `max_waiting` (RESOURCE_EXHAUSTED beyond it).
//
// Admission cannot fail later: a turn is admitted only when its worst-case KV (the backend's
// page-granular bound for its prompt plus max_new_tokens, capped by the context) fits beside the
// KV in use and what every running turn was promised; otherwise it waits (FIFO, after idle
// sessions in the store were evicted to make room), or is refused up front when it could never
// fit. KV the backend allocates outside a turn (restoring a session from the store) is reserved
// through the same ledger (KvReservations). A prefill chunk is never split below
// `prefill_chunk_tokens` (only a prompt's last chunk is shorter), which bounds the partly filled
// pages a turn may leave. Per principal (TurnRequest::principal), at most
// `max_running_per_principal` turns run at once (later turns of others pass them) and at most
// `max_queued_tokens_per_principal` tokens (prompt + max_new_tokens) are waiting or running.
//
// Cancellation (Cancel, or the request's deadline) is checked before every step: a cancelled
// turn leaves the batch at the next step, its sequence is destroyed (freeing its pages) and
// on_done gets the reason. Stop strings, stop token ids and max_tokens are the backend's to
// evaluate (the engine's stop rule, the only one): each StepItem says whether and why its turn
// ended and which text may be shown, and the scheduler applies that as it is.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/model_backend.h"
#include "server/turn_engine.h"
#include "server/work_pool.h"

namespace framezip::server {

struct SchedulerOptions {
  uint32_t max_running = 16;         // sequences in one batch
  uint32_t max_waiting = 64;         // turns preparing or waiting; more are RESOURCE_EXHAUSTED
  uint32_t step_token_budget = 512;  // decode + prefill tokens per engine step
  uint32_t prefill_chunk_tokens = 256;
  int prepare_threads = 2;
  uint32_t max_running_per_principal = 0;        // 0 = no cap
  uint64_t max_queued_tokens_per_principal = 0;  // 0 = no cap
};

class BatchScheduler final : public TurnEngine {
 public:
  // Starts the step loop. `backend` must outlive nothing: the scheduler owns it.
  BatchScheduler(std::unique_ptr<ModelBackend> backend, SchedulerOptions options);
  ~BatchScheduler() override;  // drains with an immediate deadline

  const ModelDescription& model() const override { return backend_->model(); }
  Status Submit(TurnRequest request, TurnCallbacks callbacks) override;
  void Cancel(const std::string& turn_id, Status reason) override;
  std::vector<KvBytes> ReleaseSession(const std::string& session_id) override;
  std::vector<KvBytes> SessionKv(const std::string& session_id) const override;
  uint32_t SessionCachedTokens(const std::string& session_id) const override;
  EngineLoad Load() const override;
  KvStoreHealth StoreHealth() override { return backend_->StoreHealth(); }
  KvDurability SessionDurability(const std::string& session_key) const override {
    return backend_->SessionDurability(session_key);
  }
  std::vector<KvBytes> ForgetSession(const std::string& session_key) override {
    return backend_->ForgetSession(session_key);
  }
  kvstore::KvStore* kv_store() override { return backend_->kv_store(); }
  SharedKvState ExportSharedKv(const std::string& session_key) override {
    return backend_->ExportSharedKv(session_key);
  }
  Status AdoptSharedKv(const std::string& session_key, const SharedKvState& kv) override {
    return backend_->AdoptSharedKv(session_key, kv);
  }
  void Drain(Clock::time_point deadline) override;

  // Engine steps run so far (for tests that check "within one step").
  uint64_t steps() const { return steps_.load(); }

 private:
  struct Turn;
  class Reservations;
  void PrepareTurn(std::shared_ptr<Turn> turn);
  // RESOURCE_EXHAUSTED when the turn's principal would exceed its queued-token cap (mu_ held).
  Status CheckPrincipalTokensLocked(const Turn& turn) const;
  void StepLoop();
  // Step-loop helpers; called with mu_ held unless noted.
  void ReapCancelled(std::vector<std::shared_ptr<Turn>>& finished);
  void Admit();
  void RunStep(std::unique_lock<std::mutex>& lock);
  void FinishTurn(const std::shared_ptr<Turn>& turn, Status status);  // mu_ not held
  bool ApplyToken(Turn& turn, const StepItem& item);
  uint64_t OutstandingReservationLocked() const;

  std::unique_ptr<ModelBackend> backend_;
  const SchedulerOptions options_;
  std::unique_ptr<Reservations> reservations_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // wakes the step loop: new waiting turn, cancel, drain, stop
  std::condition_variable idle_cv_;  // signals Drain when the last turn finished
  std::map<std::string, std::shared_ptr<Turn>> turns_;  // every turn not yet finished
  std::deque<std::shared_ptr<Turn>> waiting_;           // prepared, not admitted
  std::vector<std::shared_ptr<Turn>> running_;          // admitted, oldest first
  uint32_t preparing_ = 0;
  uint64_t prepare_reserved_ = 0;  // KV promised to backends' restores (KvReservations)
  bool draining_ = false;
  bool drained_ = false;
  bool stopping_ = false;
  std::atomic<uint64_t> steps_{0};

  WorkPool prepare_pool_;
  std::thread step_thread_;  // last member: starts after everything above exists
};

}  // namespace framezip::server
