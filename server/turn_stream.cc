#include "server/turn_stream.h"

#include <exception>

#include "common/logging.h"
#include "server/grpc_status.h"
#include "server/proto_convert.h"
#include "server/stateless_turn.h"

namespace framezip::server {
namespace {

// Logs one line per turn with its id and stats (text or JSON, as the process's logger is set).
void LogTurn(const char* rpc, const std::string& session_id, const Status& status,
             const TurnStats& s) {
  uint64_t kv = 0;
  for (const KvBytes& b : s.kv_bytes) kv += b.bytes;
  FZ_LOG_INFO(
      "turn {} rpc={} session={} status={} finish={} prompt_tokens={} cached_tokens={} "
      "prefilled_tokens={} visual_tokens={}/{} generated_tokens={} queue_s={:.4f} ttft_s={:.4f} "
      "decode_tok_s={:.1f} e2e_s={:.4f} kv_bytes={} compression_ratio={:.2f} policy={}",
      s.turn_id, rpc, session_id.empty() ? "-" : session_id,
      status.ok() ? "OK" : MessageOf(status), static_cast<int>(s.finish_reason), s.prompt_tokens,
      s.cached_tokens, s.prefilled_tokens, s.visual_tokens_after_pruning,
      s.visual_tokens_before_pruning, s.generated_tokens, s.queue_seconds,
      s.time_to_first_token_seconds, s.decode_tokens_per_second, s.e2e_seconds, kv,
      s.compression_ratio, s.policy.name());
}

}  // namespace

TurnStream::TurnStream(ServiceCore* core, grpc::CallbackServerContext* context, const char* rpc)
    : core_(core), context_(context), rpc_(rpc) {
  turn_id_ = core_->NewId("turn");
  context_->AddTrailingMetadata("x-framezip-request-id", turn_id_);
}

TurnStream* TurnStream::StartChat(ServiceCore* core, grpc::CallbackServerContext* context,
                                  const v1::ChatRequest* request) {
  auto* stream = new TurnStream(core, context, "Chat");
  auto begin = [stream, request] {
    Status status;
    try {
      status = stream->BeginChat(*request);
    } catch (const std::exception& e) {
      FZ_LOG_ERROR("Chat request {}: {}", stream->turn_id_, e.what());
      status = InternalError("the server failed to start the turn (request id {})",
                             stream->turn_id_);
    }
    if (!status.ok()) stream->FinishWith(status);
  };
  // With shared sessions, beginning a turn asks the KV store for the session's latest revision:
  // not in a reaction.
  if (core->shared != nullptr) {
    core->store_pool->Post(std::move(begin));
  } else {
    begin();
  }
  return stream;
}

Status TurnStream::BeginChat(const v1::ChatRequest& request) {
  FZ_ASSIGN_OR_RETURN(const std::string principal,
                      core_->Admit(*context_, /*refuse_when_draining=*/true));
  FZ_ASSIGN_OR_RETURN(ChatInput input, ValidateChat(request, core_->options.validation));
  stats_only_ = request.stats_only();
  FZ_RETURN_IF_ERROR(core_->SyncSession(principal, input.session_id));
  FZ_ASSIGN_OR_RETURN(SessionRecord record, core_->sessions->Get(input.session_id, principal));
  std::optional<SamplingSpec> sampling;
  if (input.has_sampling_override) {
    sampling = MergeSampling(record.spec.sampling, input.sampling_override);
  }
  FZ_ASSIGN_OR_RETURN(TurnRequest turn,
                      core_->sessions->BeginTurn(input.session_id, principal, turn_id_,
                                                 std::move(input.user), sampling));
  session_id_ = input.session_id;
  session_key_ = turn.session_key;
  user_ = turn.messages.back();  // with the session's media placed
  if (turn.sampling.max_tokens == 0) {
    turn.sampling.max_tokens = core_->options.validation.default_max_tokens;
  }
  turn.deadline = SteadyDeadline(*context_);
  Submit(std::move(turn));  // may finish the call: nothing after this
  return absl::OkStatus();
}

TurnStream* TurnStream::StartGenerate(ServiceCore* core, grpc::CallbackServerContext* context,
                                      const v1::GenerateRequest* request) {
  auto* stream = new TurnStream(core, context, "Generate");
  StatusOr<std::string> principal = core->Admit(*context, /*refuse_when_draining=*/true);
  if (!principal.ok()) {
    stream->FinishWith(principal.status());
    return stream;
  }
  stream->principal_ = *std::move(principal);
  // Probing inline media opens containers: not in a reaction.
  core->media_pool->Post([stream, request] { stream->PrepareGenerate(request); });
  return stream;
}

void TurnStream::PrepareGenerate(const v1::GenerateRequest* request) {
  const Clock::time_point arrival = Clock::now();
  StatusOr<TurnRequest> turn = InternalError("unset");
  try {
    turn = PrepareStatelessTurn(*core_, *request, {}, turn_id_, principal_, &temp_files_);
  } catch (const std::exception& e) {
    FZ_LOG_ERROR("Generate request {}: {}", turn_id_, e.what());
    turn = InternalError("the server failed to prepare the request (request id {})", turn_id_);
  }
  if (!turn.ok()) {
    RemoveTurnFiles(*core_, std::move(temp_files_));
    FinishWith(turn.status());
    return;
  }
  turn->arrival = arrival;
  turn->deadline = SteadyDeadline(*context_);
  Submit(*std::move(turn));
}

void TurnStream::Submit(TurnRequest request) {
  auto cancel_flag = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard lock(mu_);
    if (cancelled_) cancel_flag->store(true);
    submitted_ = true;
    cancel_flag_ = cancel_flag;
  }
  request.cancel_flag = cancel_flag;
  TurnCallbacks callbacks{
      [this](std::string text, std::vector<uint32_t> ids) {
        OnDelta(std::move(text), std::move(ids));
      },
      [this](Status status, TurnStats stats) { OnTurnDone(std::move(status), std::move(stats)); }};
  Status status = core_->engine->Submit(std::move(request), std::move(callbacks));
  if (!status.ok()) {
    // The engine took nothing: undo the session's running mark and end the call.
    if (!session_key_.empty() &&
        !core_->sessions->EndTurn(session_key_, turn_id_, user_, std::nullopt)) {
      core_->ReleaseSessionResources(session_key_);  // deleted meanwhile
    }
    RemoveTurnFiles(*core_, std::move(temp_files_));
    FinishWith(status);
  }
  // On success the engine's on_done finishes the call, possibly already: do not touch `this`.
}

void TurnStream::OnDelta(std::string text, std::vector<uint32_t> token_ids) {
  answer_ += text;
  if (stats_only_) return;
  std::unique_lock lock(mu_);
  // While a write is in flight, later tokens join the newest queued delta instead of queueing a
  // message each: a slow reader (or a busy server at high concurrency) then gets fewer, larger
  // deltas rather than a backlog of one-token messages, each costing a gRPC write.
  if (queue_.empty() || !queue_.back().has_delta()) queue_.emplace_back().mutable_delta();
  v1::TextDelta* delta = queue_.back().mutable_delta();
  delta->mutable_text()->append(text);
  for (uint32_t id : token_ids) delta->add_token_ids(id);
  Pump(lock);
}

void TurnStream::OnTurnDone(Status status, TurnStats stats) {
  bool publish = false;
  if (!session_key_.empty()) {
    const bool exists = core_->sessions->EndTurn(
        session_key_, turn_id_, user_,
        status.ok() ? std::optional<std::string>(answer_) : std::nullopt);
    // Deleted while the turn ran: the KV the turn kept belongs to no one. The session store has
    // now freed the id; nothing of this incarnation can reach a new session of that id anyway,
    // since everything is keyed by the incarnation's key.
    if (!exists) core_->ReleaseSessionResources(session_key_);
    publish = exists && status.ok() && core_->shared != nullptr;
  }
  if (publish) {
    // The new revision reaches the shared store before the client hears the turn is done, so its
    // next turn finds it on any replica. Off the engine's step thread.
    core_->store_pool->Post([this, status = std::move(status), stats = std::move(stats)] {
      core_->PublishSession(session_key_);
      DeliverEnd(status, stats);
    });
    return;
  }
  DeliverEnd(status, stats);
}

void TurnStream::DeliverEnd(const Status& status, const TurnStats& stats) {
  RemoveTurnFiles(*core_, std::move(temp_files_));
  if (core_->metrics != nullptr) core_->metrics->RecordTurn(stats);
  LogTurn(rpc_, session_id_, status, stats);
  const grpc::Status final_status = core_->Outcome(rpc_, turn_id_, status);
  std::unique_lock lock(mu_);
  if (status.ok()) {
    v1::ChatResponse last;
    ToProto(stats, last.mutable_stats());
    queue_.push_back(std::move(last));
  }
  finish_due_ = true;
  final_status_ = final_status;
  Pump(lock);
}

void TurnStream::OnWriteDone(bool ok) {
  if (!ok) {
    // The client is gone (or the deadline passed): stop the turn within one step.
    std::shared_ptr<std::atomic<bool>> flag;
    {
      std::lock_guard lock(mu_);
      flag = cancel_flag_;
    }
    if (flag) flag->store(true);
    core_->engine->Cancel(turn_id_, CancelledError("the client stopped reading the stream"));
  }
  std::unique_lock lock(mu_);
  writing_ = false;
  if (!ok) {
    client_gone_ = true;
    queue_.clear();
  }
  Pump(lock);
}

void TurnStream::OnCancel() {
  std::shared_ptr<std::atomic<bool>> flag;
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    flag = cancel_flag_;
  }
  if (flag) flag->store(true);
  const bool deadline_passed = context_->deadline() <= std::chrono::system_clock::now();
  core_->engine->Cancel(turn_id_, deadline_passed
                                      ? DeadlineExceededError("the call's deadline passed")
                                      : CancelledError("the client cancelled the call"));
}

void TurnStream::OnDone() { delete this; }

void TurnStream::FinishWith(const Status& status) {
  const grpc::Status final_status = core_->Outcome(rpc_, turn_id_, status);
  std::unique_lock lock(mu_);
  finish_due_ = true;
  final_status_ = final_status;
  Pump(lock);
}

void TurnStream::Pump(std::unique_lock<std::mutex>& lock) {
  if (finished_ || writing_) {
    lock.unlock();
    return;
  }
  if (!queue_.empty() && !client_gone_) {
    in_flight_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    StartWrite(&in_flight_);
    return;
  }
  if (finish_due_) {
    finished_ = true;
    const grpc::Status status = final_status_;
    lock.unlock();
    Finish(status);
    return;
  }
  lock.unlock();
}

}  // namespace framezip::server
