#include "server/batch_scheduler.h"

#include <algorithm>
#include <exception>

#include "common/logging.h"

namespace framezip::server {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Length of the longest prefix of `text` that ends on a UTF-8 character boundary.
size_t Utf8SafeLength(const std::string& text, size_t length) {
  length = std::min(length, text.size());
  // Walk back over continuation bytes (10xxxxxx) to the lead byte, then keep that character only
  // if it is complete.
  size_t lead = length;
  while (lead > 0 && (static_cast<unsigned char>(text[lead - 1]) & 0xC0) == 0x80) --lead;
  if (lead == 0) return length;
  const unsigned char c = static_cast<unsigned char>(text[lead - 1]);
  size_t need = 1;
  if (c >= 0xF0) {
    need = 4;
  } else if (c >= 0xE0) {
    need = 3;
  } else if (c >= 0xC0) {
    need = 2;
  }
  return (length - (lead - 1) >= need) ? length : lead - 1;
}

// f16-equivalent bytes of a stored KV entry, for the compression ratio.
double F16Equivalent(const KvBytes& kv) {
  const double b = static_cast<double>(kv.bytes);
  switch (kv.precision) {
    case KvPrecision::kF32:
      return b / 2;
    case KvPrecision::kF16:
    case KvPrecision::kBF16:
      return b;
    case KvPrecision::kInt8:
      return b * 2;
    case KvPrecision::kInt4:
      return b * 4;
    case KvPrecision::kInt2:
      return b * 8;
    case KvPrecision::kLowRank:
      return b;  // the backend's own ratio is not known here; count it as uncompressed
  }
  return b;
}

}  // namespace

struct BatchScheduler::Turn {
  TurnRequest request;
  TurnCallbacks callbacks;
  PreparedTurn prepared;
  bool prepared_ok = false;  // Prepare succeeded (guarded by mu_)
  // Guarded by mu_.
  bool cancelled = false;
  Status cancel_reason;
  // Written by the step thread as chunks run, and read under mu_ by admission, which counts a
  // principal's queued tokens (CheckPrincipalTokensLocked): atomic.
  std::atomic<uint32_t> prefill_left = 0;
  // Step thread only.
  uint32_t max_new_tokens = 0;
  std::string text;        // the answer so far, as the backend's stop rule lets it be shown
  size_t sent_length = 0;  // bytes of `text` already delivered
  std::vector<uint32_t> unsent_ids;
  FinishReason finish_reason = FinishReason::kStop;
  Clock::time_point admitted_at{};
  Clock::time_point first_token_at{};
  Clock::time_point last_token_at{};
  TurnStats stats;
};

// The ledger a backend reserves restores through: checked against the same budget Admit uses.
class BatchScheduler::Reservations final : public KvReservations {
 public:
  explicit Reservations(BatchScheduler* scheduler) : s_(scheduler) {}
  bool TryReserve(uint64_t bytes) override {
    std::lock_guard lock(s_->mu_);
    const uint64_t committed =
        s_->backend_->KvUsedBytes() + s_->OutstandingReservationLocked() + s_->prepare_reserved_;
    if (committed + bytes > s_->backend_->KvCapacityBytes()) return false;
    s_->prepare_reserved_ += bytes;
    return true;
  }
  void Release(uint64_t bytes) override {
    {
      std::lock_guard lock(s_->mu_);
      s_->prepare_reserved_ -= std::min(bytes, s_->prepare_reserved_);
    }
    s_->cv_.notify_all();
  }

 private:
  BatchScheduler* const s_;
};

BatchScheduler::BatchScheduler(std::unique_ptr<ModelBackend> backend, SchedulerOptions options)
    : backend_(std::move(backend)),
      options_(options),
      reservations_(std::make_unique<Reservations>(this)),
      prepare_pool_("prepare", options.prepare_threads),
      step_thread_([this] { StepLoop(); }) {}

BatchScheduler::~BatchScheduler() {
  Drain(Clock::now());
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  step_thread_.join();
}

Status BatchScheduler::Submit(TurnRequest request, TurnCallbacks callbacks) {
  if (request.turn_id.empty()) return InvalidArgumentError("turn_id is empty");
  auto turn = std::make_shared<Turn>();
  {
    std::lock_guard lock(mu_);
    if (draining_) {
      return UnavailableError("the server is draining for shutdown; retry on another replica");
    }
    const uint32_t queued = preparing_ + static_cast<uint32_t>(waiting_.size());
    if (queued >= options_.max_waiting) {
      return ResourceExhaustedError("wait queue full: {} turns are waiting (limit {}); retry later",
                                    queued, options_.max_waiting);
    }
    if (turns_.count(request.turn_id) != 0) {
      return InvalidArgumentError("turn_id '{}' is already in use", request.turn_id);
    }
    turn->request = std::move(request);
    turn->callbacks = std::move(callbacks);
    turns_[turn->request.turn_id] = turn;
    ++preparing_;
  }
  prepare_pool_.Post([this, turn] { PrepareTurn(turn); });
  return absl::OkStatus();
}

void BatchScheduler::PrepareTurn(std::shared_ptr<Turn> turn) {
  StatusOr<PreparedTurn> prepared = InternalError("prepare did not run");
  try {
    prepared = backend_->Prepare(turn->request, *reservations_);
  } catch (const std::exception& e) {
    FZ_LOG_ERROR("turn {}: prepare threw: {}", turn->request.turn_id, e.what());
    prepared = InternalError("preparing the turn failed (request id {})", turn->request.turn_id);
  }
  Status failure;
  {
    std::lock_guard lock(mu_);
    --preparing_;
    if (!turn->cancelled && turn->request.cancel_flag && turn->request.cancel_flag->load()) {
      turn->cancelled = true;
      turn->cancel_reason = CancelledError("the client cancelled the call");
    }
    if (turn->cancelled) {
      failure = turn->cancel_reason;
    } else if (!prepared.ok()) {
      failure = prepared.status();
    } else if (prepared->predicted_kv_bytes > backend_->KvCapacityBytes()) {
      failure = ResourceExhaustedError(
          "KV budget exceeded: the turn needs about {} bytes of KV memory, the engine has {}; use "
          "fewer frames or a compressing policy",
          prepared->predicted_kv_bytes, backend_->KvCapacityBytes());
    } else {
      turn->prepared = std::move(*prepared);
      PreparedTurn& p = turn->prepared;
      // The backend leaves at least one prompt token to prefill (it samples the first token);
      // clamp in case it does not.
      if (p.prompt_tokens == 0) p.prompt_tokens = 1;
      p.cached_tokens = std::min(p.cached_tokens, p.prompt_tokens - 1);
      turn->prefill_left = p.prompt_tokens - p.cached_tokens;
      turn->max_new_tokens = std::max<uint32_t>(p.max_new_tokens, 1);
      failure = CheckPrincipalTokensLocked(*turn);
      if (failure.ok()) {
        turn->prepared_ok = true;
        waiting_.push_back(turn);
      }
    }
  }
  if (!failure.ok()) {
    FinishTurn(turn, failure);
  } else {
    cv_.notify_all();
  }
}

Status BatchScheduler::CheckPrincipalTokensLocked(const Turn& turn) const {
  const uint64_t cap = options_.max_queued_tokens_per_principal;
  if (cap == 0) return absl::OkStatus();
  auto tokens_of = [](const Turn& t) {
    return uint64_t{t.prefill_left.load()} + uint64_t{t.max_new_tokens};
  };
  uint64_t queued = 0;
  for (const auto& [id, other] : turns_) {
    if (other.get() != &turn && other->prepared_ok &&
        other->request.principal == turn.request.principal) {
      queued += tokens_of(*other);
    }
  }
  if (queued + tokens_of(turn) > cap) {
    return ResourceExhaustedError(
        "the turn needs {} tokens (prompt + max_tokens) and {} are queued or running for this "
        "caller; the limit is {} (max_queued_tokens_per_principal); retry later or lower "
        "max_tokens",
        tokens_of(turn), queued, cap);
  }
  return absl::OkStatus();
}

void BatchScheduler::Cancel(const std::string& turn_id, Status reason) {
  {
    std::lock_guard lock(mu_);
    auto it = turns_.find(turn_id);
    if (it == turns_.end() || it->second->cancelled) return;
    it->second->cancelled = true;
    it->second->cancel_reason = reason.ok() ? CancelledError("the turn was cancelled") : reason;
  }
  cv_.notify_all();
}

std::vector<KvBytes> BatchScheduler::ReleaseSession(const std::string& session_id) {
  std::vector<KvBytes> freed = backend_->ReleaseSession(session_id);
  cv_.notify_all();  // room for waiting turns
  return freed;
}

std::vector<KvBytes> BatchScheduler::SessionKv(const std::string& session_id) const {
  return backend_->SessionKv(session_id);
}

uint32_t BatchScheduler::SessionCachedTokens(const std::string& session_id) const {
  return backend_->SessionCachedTokens(session_id);
}

EngineLoad BatchScheduler::Load() const {
  EngineLoad load;
  {
    std::lock_guard lock(mu_);
    load.running = static_cast<uint32_t>(running_.size());
    load.waiting = preparing_ + static_cast<uint32_t>(waiting_.size());
  }
  load.kv_used_bytes = backend_->KvUsedBytes();
  load.kv_capacity_bytes = backend_->KvCapacityBytes();
  return load;
}

void BatchScheduler::Drain(Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  if (drained_) return;
  draining_ = true;
  if (!idle_cv_.wait_until(lock, deadline, [this] { return turns_.empty(); })) {
    FZ_LOG_WARN("drain: grace period over, cancelling {} turns", turns_.size());
    for (auto& [id, turn] : turns_) {
      if (turn->cancelled) continue;
      turn->cancelled = true;
      turn->cancel_reason = UnavailableError("the server shut down before the turn finished");
    }
    cv_.notify_all();
    idle_cv_.wait(lock, [this] { return turns_.empty(); });
  }
  drained_ = true;
  lock.unlock();
  if (Status s = backend_->FlushSessions(); !s.ok()) {
    FZ_LOG_ERROR("drain: flushing session KV to the store failed: {}", MessageOf(s));
  }
}

uint64_t BatchScheduler::OutstandingReservationLocked() const {
  uint64_t outstanding = 0;
  for (const auto& turn : running_) {
    const uint64_t predicted = turn->prepared.predicted_kv_bytes;
    const uint64_t allocated =
        turn->prepared.sequence ? turn->prepared.sequence->allocated_bytes() : 0;
    if (predicted > allocated) outstanding += predicted - allocated;
  }
  return outstanding;
}

void BatchScheduler::ReapCancelled(std::vector<std::shared_ptr<Turn>>& finished) {
  const Clock::time_point now = Clock::now();
  auto expired = [&](Turn& turn) {
    if (!turn.cancelled && now >= turn.request.deadline) {
      turn.cancelled = true;
      turn.cancel_reason = DeadlineExceededError("the call's deadline passed during the turn");
    }
    if (!turn.cancelled && turn.request.cancel_flag && turn.request.cancel_flag->load()) {
      turn.cancelled = true;
      turn.cancel_reason = CancelledError("the client cancelled the call");
    }
    return turn.cancelled;
  };
  for (auto it = running_.begin(); it != running_.end();) {
    if (expired(**it)) {
      finished.push_back(*it);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (expired(**it)) {
      finished.push_back(*it);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

void BatchScheduler::Admit() {
  const uint64_t capacity = backend_->KvCapacityBytes();
  std::map<std::string, uint32_t> running_per_principal;
  for (const auto& turn : running_) ++running_per_principal[turn->request.principal];
  for (auto it = waiting_.begin();
       it != waiting_.end() && running_.size() < options_.max_running;) {
    const std::shared_ptr<Turn> turn = *it;
    // A caller at its running cap waits; other callers' turns pass it.
    if (options_.max_running_per_principal > 0 &&
        running_per_principal[turn->request.principal] >= options_.max_running_per_principal) {
      ++it;
      continue;
    }
    const uint64_t need = turn->prepared.predicted_kv_bytes;
    auto committed = [&] {
      return backend_->KvUsedBytes() + OutstandingReservationLocked() + prepare_reserved_;
    };
    // Idle sessions whose KV is in the store make room first (their next turn restores it).
    if (committed() + need > capacity) backend_->EvictIdleSessions(committed() + need - capacity);
    // FIFO: a turn that does not fit waits for running turns (and restores) to finish (no
    // overtaking, so a large turn is not starved by small ones), and for sessions' KV commits on
    // their way to the store (once in, those sessions can be evicted). With none of that, nothing
    // will free memory: refuse it now rather than admit it to fail later.
    if (committed() + need > capacity &&
        (!running_.empty() || prepare_reserved_ > 0 || backend_->KvCommitsPending())) {
      break;
    }
    if (committed() + need > capacity) {
      turn->cancelled = true;
      turn->cancel_reason = ResourceExhaustedError(
          "KV budget exceeded: the turn needs up to {} bytes of KV memory and {} of {} are held "
          "by sessions; delete idle sessions, lower max_tokens, or retry later",
          need, backend_->KvUsedBytes(), capacity);
      break;  // reaped (and finished) on the next pass
    }
    turn->admitted_at = Clock::now();
    ++running_per_principal[turn->request.principal];
    running_.push_back(turn);
    it = waiting_.erase(it);
  }
}

void BatchScheduler::StepLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    std::vector<std::shared_ptr<Turn>> finished;
    ReapCancelled(finished);
    Admit();
    if (!finished.empty()) {
      lock.unlock();
      for (auto& turn : finished) FinishTurn(turn, turn->cancel_reason);
      lock.lock();
      continue;  // cancellations may have made room; admit again before stepping
    }
    if (running_.empty()) {
      if (stopping_ && turns_.empty()) return;
      // Waiting turns that do not fit are re-checked for their deadline now and then; otherwise
      // sleep until a turn arrives or something changes.
      if (waiting_.empty()) {
        cv_.wait(lock);
      } else {
        cv_.wait_for(lock, std::chrono::milliseconds(20));
      }
      continue;
    }
    RunStep(lock);
  }
}

void BatchScheduler::RunStep(std::unique_lock<std::mutex>& lock) {
  // Decode tokens of every turn past its prefill, then prefill chunks within the token budget.
  std::vector<std::shared_ptr<Turn>> batch_turns;
  std::vector<StepItem> batch;
  uint32_t budget = options_.step_token_budget;
  for (const auto& turn : running_) {
    if (turn->prefill_left == 0) {
      batch_turns.push_back(turn);
      StepItem item;
      item.sequence = turn->prepared.sequence.get();
      batch.push_back(std::move(item));
      budget = budget > 0 ? budget - 1 : 0;
    }
  }
  bool prefill_added = false;
  for (const auto& turn : running_) {
    if (turn->prefill_left == 0) continue;
    // Chunks are whole (prefill_chunk_tokens, or the prompt's rest), which bounds the partly
    // filled KV pages a turn leaves (its admission counted them). The first chunk of a step runs
    // even past the budget, so prefill always advances.
    const uint32_t chunk =
        std::max<uint32_t>(1, std::min(turn->prefill_left.load(), options_.prefill_chunk_tokens));
    if (prefill_added && chunk > budget) break;
    prefill_added = true;
    batch_turns.push_back(turn);
    StepItem item;
    item.sequence = turn->prepared.sequence.get();
    item.prefill_tokens = chunk;
    batch.push_back(std::move(item));
    budget -= std::min(budget, chunk);
  }
  lock.unlock();

  Status step_status;
  try {
    step_status = backend_->Step(batch);
  } catch (const std::exception& e) {
    FZ_LOG_ERROR("engine step threw: {}", e.what());
    step_status = InternalError("the engine step failed");
  }
  steps_.fetch_add(1);

  std::vector<std::pair<std::shared_ptr<Turn>, Status>> done;
  for (size_t i = 0; i < batch.size(); ++i) {
    Turn& turn = *batch_turns[i];
    StepItem& item = batch[i];
    if (!step_status.ok()) {
      done.emplace_back(batch_turns[i], step_status);
    } else if (!item.status.ok()) {
      done.emplace_back(batch_turns[i], item.status);
    } else if (ApplyToken(turn, item)) {
      done.emplace_back(batch_turns[i], absl::OkStatus());
    }
  }
  lock.lock();
  for (auto& [turn, status] : done) {
    running_.erase(std::remove(running_.begin(), running_.end(), turn), running_.end());
  }
  if (done.empty()) return;
  lock.unlock();
  for (auto& [turn, status] : done) FinishTurn(turn, status);
  lock.lock();
}

bool BatchScheduler::ApplyToken(Turn& turn, const StepItem& item) {
  if (item.prefill_tokens > 0) {
    turn.prefill_left -= std::min(turn.prefill_left.load(), item.prefill_tokens);
    if (!item.emitted) return false;
    turn.prefill_left = 0;
  }
  if (!item.emitted) return false;  // a decode step that produced nothing (should not happen)
  const Clock::time_point now = Clock::now();
  if (turn.stats.generated_tokens == 0) {
    turn.first_token_at = now;
  } else {
    turn.stats.inter_token_seconds.push_back(Seconds(now - turn.last_token_at));
  }
  turn.last_token_at = now;
  ++turn.stats.generated_tokens;

  // The backend's stop rule decided whether this token ends the turn and which of its text may
  // be shown (a possible stop string held back, a stop string cut): it is applied as it is.
  // A stop token's id is not shown; every other token's is.
  if (item.stop != StopCause::kStopToken) turn.unsent_ids.push_back(item.token_id);
  turn.text += item.text;
  const bool finished = item.stop != StopCause::kNone;
  if (finished) {
    turn.finish_reason =
        item.stop == StopCause::kLength ? FinishReason::kLength : FinishReason::kStop;
  }
  // Text goes out as it comes, but never a partial UTF-8 character.
  const size_t deliver = std::max(Utf8SafeLength(turn.text, turn.text.size()), turn.sent_length);
  std::string delta;
  if (deliver > turn.sent_length) {
    delta = turn.text.substr(turn.sent_length, deliver - turn.sent_length);
    turn.sent_length = deliver;
  }
  // Every token reaches the client when it is generated: its id at once, its text as soon as the
  // text is deliverable. So a client sees progress, and can time tokens, even while text waits
  // (a partial UTF-8 character, a possible stop string, or tokens that decode to nothing).
  if (!delta.empty() || !turn.unsent_ids.empty()) {
    if (turn.callbacks.on_delta)
      turn.callbacks.on_delta(std::move(delta), std::move(turn.unsent_ids));
    turn.unsent_ids.clear();
  }
  return finished;
}

void BatchScheduler::FinishTurn(const std::shared_ptr<Turn>& turn, Status status) {
  const Clock::time_point now = Clock::now();
  const TurnRequest& request = turn->request;
  PreparedTurn& p = turn->prepared;
  TurnStats& stats = turn->stats;
  stats.turn_id = request.turn_id;
  stats.policy = request.policy;
  stats.prompt_tokens = p.prompt_tokens;
  stats.cached_tokens = p.cached_tokens;
  stats.prefilled_tokens = p.prompt_tokens - p.cached_tokens;
  stats.visual_tokens_before_pruning = p.visual_tokens_before_pruning;
  stats.visual_tokens_after_pruning = p.visual_tokens_after_pruning;
  stats.media_decode_seconds = p.media_decode_seconds;
  stats.vision_encode_seconds = p.vision_encode_seconds;
  stats.kv_restore_seconds = p.kv_restore_seconds;
  stats.kv_restore_tier = p.kv_restore_tier;
  stats.seed = p.seed;
  const bool admitted = turn->admitted_at != Clock::time_point{};
  stats.queue_seconds = Seconds((admitted ? turn->admitted_at : now) - request.arrival);
  if (stats.generated_tokens > 0) {
    stats.time_to_first_token_seconds = Seconds(turn->first_token_at - request.arrival);
    stats.prefill_seconds = Seconds(turn->first_token_at - turn->admitted_at);
    const double decode_seconds = Seconds(turn->last_token_at - turn->first_token_at);
    if (stats.generated_tokens > 1 && decode_seconds > 0) {
      stats.decode_tokens_per_second = (stats.generated_tokens - 1) / decode_seconds;
    }
  }
  stats.e2e_seconds = Seconds(now - request.arrival);
  stats.finish_reason = status.ok() ? turn->finish_reason : FinishReason::kCancelled;

  if (p.sequence) p.sequence->ReportStats(stats);
  // Keep the finished turn's KV for the session's next turn; a failed or cancelled turn's pages
  // are freed with its sequence below.
  if (status.ok() && !request.session_key.empty() && p.sequence) {
    if (Status s = backend_->Commit(request.session_key, *p.sequence); !s.ok()) {
      FZ_LOG_WARN("turn {}: keeping the session's KV failed: {}", request.turn_id, MessageOf(s));
    }
  }
  p.sequence.reset();
  if (!request.session_key.empty()) {
    stats.kv_bytes = backend_->SessionKv(request.session_key);
    if (!stats.compression_ratio_reported) {
      double stored = 0;
      double f16 = 0;
      for (const KvBytes& kv : stats.kv_bytes) {
        stored += static_cast<double>(kv.bytes);
        f16 += F16Equivalent(kv);
      }
      stats.compression_ratio = stored > 0 ? f16 / stored : 1;
    }
  }

  TurnCallbacks callbacks = std::move(turn->callbacks);
  {
    std::lock_guard lock(mu_);
    turns_.erase(request.turn_id);
    if (turns_.empty()) idle_cv_.notify_all();
  }
  cv_.notify_all();  // freed memory may admit a waiting turn
  if (callbacks.on_done) callbacks.on_done(std::move(status), std::move(stats));
}

}  // namespace framezip::server
