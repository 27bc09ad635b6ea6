#include "server/engine_backend.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <thread>

#include "common/logging.h"
#include "engine/core/device.h"
#include "engine/runtime/engine.h"
#include "engine/vision/llava_vision.h"
#include "kvstore/service/remote_store.h"
#include "kvstore/tiered_store.h"
#include "media/media.h"
#include "server/media_probe.h"
#include "server/preprocess_spec.h"

namespace framezip::server {

namespace rt = engine::runtime;

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

KvPrecision PrecisionOf(engine::kv::KvFormat format) {
  switch (format) {
    case engine::kv::KvFormat::kF32:
      return KvPrecision::kF32;
    case engine::kv::KvFormat::kF16:
      return KvPrecision::kF16;
    case engine::kv::KvFormat::kInt4:
      return KvPrecision::kInt4;
    case engine::kv::KvFormat::kInt2:
      return KvPrecision::kInt2;
    case engine::kv::KvFormat::kLowRank:
      return KvPrecision::kLowRank;
  }
  return KvPrecision::kF16;
}

// The KV store config `kvstore` names: "embedded" (a TieredStore in this process: host RAM, plus
// disk when kvstore_disk_path is set), "none", or the address of a framezip-kvstore.
StatusOr<std::unique_ptr<SessionKvCache>> OpenKvCache(const ServerConfig& config,
                                                      const std::string& model_id) {
  SessionKvCacheOptions options;
  options.model_id = model_id;
  options.pin_ttl = std::chrono::seconds(std::max(config.max_session_ttl_seconds, 60));
  if (config.kvstore == "none" || config.kvstore.empty()) return nullptr;
  if (config.kvstore == "embedded") {
    kvstore::TieredStoreOptions o;
    o.host = kvstore::HostTierOptions{static_cast<uint64_t>(config.kvstore_host_bytes)};
    if (!config.kvstore_disk_path.empty()) {
      kvstore::DiskTierOptions disk;
      disk.dir = config.kvstore_disk_path;
      o.disk = disk;
      // Host first; a block reaches disk when the host tier evicts it or at drain (Flush).
      o.write_mode = kvstore::WriteMode::kWriteBack;
    }
    if (!config.kvstore_redis.empty()) {
      kvstore::RedisTierOptions redis;
      FZ_RETURN_IF_ERROR(
          Annotate(kvstore::ParseRedisAddress(config.kvstore_redis, &redis), "--kvstore-redis"));
      o.redis = redis;
      // Replicas share the Redis tier: every block reaches it before the turn ends.
      o.write_mode = kvstore::WriteMode::kWriteThrough;
      o.redis_write_through = true;
    }
    o.default_pin_ttl = options.pin_ttl;
    FZ_ASSIGN_OR_RETURN(std::unique_ptr<kvstore::TieredStore> store,
                        kvstore::TieredStore::Open(std::move(o)));
    kvstore::TieredStore* embedded = store.get();
    return std::make_unique<SessionKvCache>(std::move(store), embedded, options);
  }
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<kvstore::service::RemoteStore> remote,
                      kvstore::service::RemoteStore::Connect({.address = config.kvstore}));
  return std::make_unique<SessionKvCache>(std::move(remote), nullptr, options);
}

}  // namespace

// One turn: the messages it feeds, and the conversation it runs on (the session's, or its own
// for a stateless Generate).
class EngineBackend::Sequence final : public BackendSequence {
 public:
  ~Sequence() override {
    // Only a turn that ran a step leaves a partial prompt or reply behind; one that failed in
    // Prepare, or never got its first chunk, did not touch its conversation's KV.
    if (!committed_ && conversation_ != nullptr) {
      if (conversation_->decoding() || conversation_->starting()) {
        owner_->engine_->Cancel(*conversation_);
      }
      if (started_ && !session_key_.empty()) owner_->DropConversation(session_key_, conversation_);
    }
    if (holds_session_) owner_->EndTurn(session_key_);
  }
  uint64_t allocated_bytes() const override {
    const uint64_t now = conversation_ != nullptr ? conversation_->kv_bytes() : 0;
    return now > kv_at_start_ ? now - kv_at_start_ : 0;
  }
  void ReportStats(TurnStats& stats) const override {
    if (conversation_ == nullptr || !started_) return;
    const rt::TurnStats& s = conversation_->current().stats;
    stats.cached_tokens = static_cast<uint32_t>(s.cached_tokens);
    stats.prefilled_tokens = static_cast<uint32_t>(s.prefilled_tokens);
    stats.prompt_tokens = static_cast<uint32_t>(s.cached_tokens + s.prefilled_tokens);
    stats.visual_tokens_before_pruning = static_cast<uint32_t>(s.visual_tokens);
    // What reached the last layer (Dynamic-LLaVA removes visual rows from sparse_layer on).
    stats.visual_tokens_after_pruning = static_cast<uint32_t>(
        s.layer_visual_tokens.empty() ? s.visual_tokens : s.layer_visual_tokens.back());
    stats.layer_visual_tokens.assign(s.layer_visual_tokens.begin(), s.layer_visual_tokens.end());
    stats.prefill_flops_saved_ratio = s.prefill_flops_saved_ratio;
    stats.text_tokens_gated = static_cast<uint32_t>(s.text_tokens_gated);
    stats.generated_tokens = static_cast<uint32_t>(s.generated_tokens);
    stats.vision_encode_seconds = s.vision_ms / 1000.0;
    if (s.prefill_ms > 0) stats.prefill_seconds = s.prefill_ms / 1000.0;
    stats.layer_kept_ratio = s.layer_kept_ratio;
    stats.selection_overhead_ms = s.selection_overhead_ms;
    stats.compression_ratio = s.compression_ratio;
    stats.compression_ratio_reported = true;
  }

  EngineBackend* owner_ = nullptr;
  std::string session_key_;
  rt::Conversation* conversation_ = nullptr;
  std::unique_ptr<rt::Conversation> owned_;  // stateless turns
  std::vector<rt::Message> messages_;        // this turn's new messages
  size_t messages_total_ = 0;                // conversation length after this turn's user message
  rt::TurnOptions options_;
  uint64_t kv_at_start_ = 0;
  bool started_ = false;  // a step ran (part of) this turn
  bool committed_ = false;
  bool holds_session_ = false;                         // the session is marked busy for this turn
  std::vector<std::array<uint8_t, 32>> media_hashes_;  // of this turn's new media (store keys)
};

StatusOr<std::unique_ptr<EngineBackend>> EngineBackend::Load(
    const ServerConfig& config, std::shared_ptr<media::MediaBackend> media) {
  if (media == nullptr) return InvalidArgumentError("the engine needs a media backend");
  rt::EngineOptions options;
  FZ_ASSIGN_OR_RETURN(options.device, engine::ParseDevice(config.device));
  options.kv_max_bytes = config.kv_budget_bytes > 0 ? config.kv_budget_bytes : int64_t{1} << 30;
  options.prefill_chunk_tokens = config.prefill_chunk_tokens;
  options.default_policy = config.default_policy;
  std::unique_ptr<EngineBackend> b(new EngineBackend());
  b->prefill_chunk_tokens_ = config.prefill_chunk_tokens;
  b->media_ = std::move(media);
  b->media_limits_ =
      MediaLimitsFor(UploadLimitsFrom(config), static_cast<uint32_t>(config.max_frames));
  // A turn's decode also preprocesses, which the upload's check does not: more time.
  b->media_limits_.max_decode_s = std::max(b->media_limits_.max_decode_s, 120.0);
  FZ_ASSIGN_OR_RETURN(b->engine_, rt::Engine::Load(config.model_dir, options));
  const auto& c = b->engine_->config();
  b->kv_capacity_bytes_ = static_cast<uint64_t>(options.kv_max_bytes);
  ModelDescription& m = b->model_;
  m.name = std::filesystem::path(config.model_dir).lexically_normal().filename().string();
  if (m.name.empty()) m.name = std::filesystem::path(config.model_dir).parent_path().filename();
  m.architecture = c.model_type;
  m.text_architecture = c.text.model_type;
  m.vision_architecture = c.vision.model_type;
  m.context_tokens = static_cast<uint32_t>(c.text.max_position_embeddings);
  m.vocab_size = static_cast<uint32_t>(c.text.vocab_size);
  m.weight_dtype = c.torch_dtype;
  m.device = config.device;
  // Every policy this model can run (dynamic_llava needs the model's predictors).
  for (PolicyKind kind : {PolicyKind::kNone, PolicyKind::kZipVl, PolicyKind::kAttentionPack,
                          PolicyKind::kDynamicLlava, PolicyKind::kFastV, PolicyKind::kKivi}) {
    if (b->engine_->NewConversation(PolicyName(kind)).ok()) m.policies.push_back(kind);
  }
  m.vision.image_size = static_cast<uint32_t>(c.vision.image_size);
  m.vision.patch_size = static_cast<uint32_t>(c.vision.patch_size);
  for (double v : b->engine_->preprocessor().image_mean) m.vision.image_mean.push_back(float(v));
  for (double v : b->engine_->preprocessor().image_std) m.vision.image_std.push_back(float(v));
  // Visual tokens as the engine expands them (LLaVA-OneVision video: the patch grid pooled 2x2
  // per frame plus one newline per video; images: the selected patches plus a newline).
  m.vision.tokens_per_image = static_cast<uint32_t>(engine::vision::BaseImageTokenCount(c));
  StatusOr<int64_t> one_frame = engine::vision::VideoTokenCount(c, 1);
  StatusOr<int64_t> two_frames = engine::vision::VideoTokenCount(c, 2);
  if (one_frame.ok() && two_frames.ok()) {
    m.vision.tokens_per_video_frame = static_cast<uint32_t>(*two_frames - *one_frame);
    m.vision.tokens_per_video = static_cast<uint32_t>(*one_frame - (*two_frames - *one_frame));
  }
  // Uniform frames per video when a session or upload asks for none: LLaVA-OneVision's default.
  m.vision.default_num_frames = 32;
  const std::string model_id = fmt::format("{}/{}x{}x{}", m.name, c.text.num_hidden_layers,
                                           c.text.num_key_value_heads, c.text.hidden_size);
  FZ_ASSIGN_OR_RETURN(b->kv_cache_, OpenKvCache(config, model_id));
  FZ_LOG_INFO("engine: loaded {} ({}, {} layers, context {}), session KV store: {}", m.name,
              m.architecture, c.text.num_hidden_layers, m.context_tokens, config.kvstore);
  return b;
}

EngineBackend::~EngineBackend() {
  std::lock_guard lock(mu_);
  sessions_.clear();  // conversations before the engine
}

KvPrecision EngineBackend::Precision() const { return KvPrecision::kF16; }

// Prepare, step by step: the session's conversation (restored from the store when it was
// evicted), the new messages' media, the sampling options, then rendering/tokenizing/vision in
// the engine, and the figures the scheduler admits the turn by.
StatusOr<PreparedTurn> EngineBackend::Prepare(const TurnRequest& request, KvReservations& kv) {
  auto seq = std::make_unique<Sequence>();
  seq->owner_ = this;
  seq->session_key_ = request.session_key;
  PreparedTurn turn;
  FZ_ASSIGN_OR_RETURN(const size_t first_new, AttachConversation(request, kv, *seq, turn));
  seq->messages_total_ = request.messages.size();
  FZ_RETURN_IF_ERROR(DecodeNewMedia(request, first_new, *seq, turn));
  seq->options_ = TurnOptionsFor(request.sampling);

  // Render, tokenize and run the vision tower here, on the prepare pool: the step thread then
  // only prefills the prompt, in chunks of the scheduler's size, fused with the decode tokens of
  // the running turns (Engine::MixedStep).
  const auto t_vision = Clock::now();
  FZ_RETURN_IF_ERROR(engine_->PrepareTurn(*seq->conversation_, seq->messages_, seq->options_));
  turn.vision_encode_seconds = Seconds(Clock::now() - t_vision);
  FillAdmission(*seq->conversation_, request.sampling, turn);
  turn.sequence = std::move(seq);
  return turn;
}

StatusOr<size_t> EngineBackend::AttachConversation(const TurnRequest& request, KvReservations& kv,
                                                   Sequence& seq, PreparedTurn& turn) {
  if (request.session_key.empty()) {  // stateless (Generate): a conversation of its own
    FZ_ASSIGN_OR_RETURN(seq.owned_, engine_->NewConversation(EngineSpec(request.policy)));
    seq.conversation_ = seq.owned_.get();
    return 0;
  }
  bool evicted = false;
  {
    std::lock_guard lock(mu_);
    SessionState& state = sessions_[request.session_key];
    if (state.busy) {
      return FailedPreconditionError("session '{}' already has a turn in progress",
                                     request.session_id);
    }
    state.busy = true;
    seq.holds_session_ = true;
    state.last_used = Clock::now();
    evicted = state.conversation == nullptr && state.messages_fed > 0;
  }
  RestoredSession restored;
  if (evicted) {
    FZ_ASSIGN_OR_RETURN(restored, RestoreEvicted(request, kv, turn));
  }
  std::lock_guard lock(mu_);
  SessionState& state = sessions_[request.session_key];
  if (restored.conversation != nullptr) {
    state.conversation = std::move(restored.conversation);
    state.mark = std::move(restored.mark);
    state.messages_fed = state.stored_messages;
    state.kv_bytes = state.conversation->kv_bytes();
    state.cached_tokens = static_cast<uint32_t>(state.conversation->cached_tokens());
    state.store_current = true;
  } else if (state.conversation == nullptr) {
    FZ_ASSIGN_OR_RETURN(state.conversation, engine_->NewConversation(EngineSpec(request.policy)));
    state.messages_fed = 0;
    state.stored_messages = 0;
    state.mark = {};
    state.pending_media.clear();
    state.store_current = false;
  }
  seq.conversation_ = state.conversation.get();
  seq.kv_at_start_ = state.kv_bytes;
  return std::min(state.messages_fed, request.messages.size() - 1);
}

StatusOr<EngineBackend::RestoredSession> EngineBackend::RestoreEvicted(const TurnRequest& request,
                                                                       KvReservations& kv,
                                                                       PreparedTurn& turn) {
  RestoredSession out;
  if (kv_cache_ != nullptr && kv_cache_->segments(request.session_key) > 0) {
    KvTier tier = KvTier::kHost;
    StatusOr<rt::RestoredConversation> r =
        RestoreFromStore(request, kv, &turn.kv_restore_seconds, &tier);
    // No KV room for the restore within the turn's patience: refuse the turn (nothing of the
    // session is lost; its next turn restores).
    if (absl::IsResourceExhausted(r.status()) || absl::IsCancelled(r.status()) ||
        absl::IsDeadlineExceeded(r.status())) {
      return r.status();
    }
    if (r.ok()) {
      turn.kv_restore_tier = tier;
      out.conversation = std::move(r->conversation);
      out.mark = std::move(r->mark);
      return out;
    }
    FZ_LOG_WARN(
        "session '{}': restoring its KV from the store failed ({}); re-prefilling its "
        "history",
        request.session_id, MessageOf(r.status()));
  }
  // Starting over from the first message: the store's segments no longer continue this KV.
  if (kv_cache_ != nullptr) kv_cache_->Release(request.session_key);
  return out;
}

Status EngineBackend::DecodeNewMedia(const TurnRequest& request, size_t first_new, Sequence& seq,
                                     PreparedTurn& turn) {
  const auto t0 = Clock::now();
  const media::PreprocessSpec spec =
      PreprocessSpecFor(engine_->preprocessor(), engine_->image_size());
  for (size_t i = first_new; i < request.messages.size(); ++i) {
    const ChatMessage& m = request.messages[i];
    rt::Message out;
    out.role = RoleName(m.role);
    for (const ContentPart& part : m.content) {
      if (part.media_id.empty()) {
        out.text += part.text;
        continue;
      }
      auto it = std::find_if(request.media.begin(), request.media.end(),
                             [&](const MediaInfo& mi) { return mi.media_id == part.media_id; });
      if (it == request.media.end()) {
        return InvalidArgumentError("media_id '{}' is not in the request", part.media_id);
      }
      const std::filesystem::path path(it->path);
      // The sampling and limits the upload was validated with, so this decode does not fail
      // where the upload passed; in the media workers.
      const media::FrameSamplingSpec sampling = ChatSampling(*it);
      media::MediaLimits limits = media_limits_;
      limits.max_frames = std::max(limits.max_frames, sampling.num_frames);
      media::DecodeOptions decode_options;
      decode_options.cancel = request.cancel_flag.get();
      StatusOr<media::DecodedMedia> decoded =
          media_->Decode(media::MediaSource::FromFile(path.parent_path(), path.filename().string()),
                         sampling, spec, limits, decode_options);
      if (!decoded.ok()) return Annotate(decoded.status(), fmt::format("media '{}'", it->name));
      const media::FrameBatch& fb = decoded->frames;
      FZ_ASSIGN_OR_RETURN(engine::Tensor pixels,
                          engine::Tensor::Empty({fb.num_frames, fb.channels, fb.height, fb.width},
                                                engine::DType::kF32));
      std::copy(fb.data.begin(), fb.data.end(), pixels.data<float>());
      seq.media_hashes_.push_back(MediaHashBytes(it->content_hash));
      rt::VisualInput visual;
      visual.kind = it->kind == MediaKind::kImage ? rt::VisualInput::Kind::kImage
                                                  : rt::VisualInput::Kind::kVideo;
      visual.pixels = std::move(pixels);
      out.visuals.push_back(std::move(visual));
      turn.visual_tokens_before_pruning += it->visual_tokens;
    }
    seq.messages_.push_back(std::move(out));
  }
  turn.visual_tokens_after_pruning = turn.visual_tokens_before_pruning;
  turn.media_decode_seconds = Seconds(Clock::now() - t0);
  return absl::OkStatus();
}

rt::TurnOptions EngineBackend::TurnOptionsFor(const SamplingSpec& s) {
  rt::TurnOptions options;
  auto& sp = options.sampling;
  sp.do_sample = s.temperature > 0;
  sp.temperature = s.temperature > 0 ? s.temperature : 1.0f;
  sp.top_k = static_cast<int>(s.top_k);
  sp.top_p = s.top_p;
  sp.repetition_penalty = s.repetition_penalty;
  sp.seed = s.seed;
  // Validation bounds max_tokens (<= 2^20), and the engine caps it at the context.
  sp.max_new_tokens = static_cast<int>(std::max<uint32_t>(s.max_tokens, 1));
  for (uint32_t id : s.stop_token_ids) sp.stop_token_ids.push_back(static_cast<int32_t>(id));
  sp.stop_strings = s.stop;
  options.ignore_eos = s.ignore_eos;
  return options;
}

void EngineBackend::FillAdmission(const rt::Conversation& conversation,
                                  const SamplingSpec& sampling, PreparedTurn& turn) const {
  const int64_t cached = conversation.cached_tokens();
  const int64_t to_prefill = conversation.prefill_remaining();
  turn.prompt_tokens = static_cast<uint32_t>(cached + to_prefill);
  turn.cached_tokens = static_cast<uint32_t>(cached);
  // The prompt fits the context (PrepareTurn checked); the answer gets what is left of it.
  const int64_t room = engine_->context_tokens() - cached - to_prefill;
  turn.max_new_tokens = static_cast<uint32_t>(std::clamp<int64_t>(
      std::min<int64_t>(sampling.max_tokens, room), 1, std::numeric_limits<uint32_t>::max()));
  // What the turn may add to the KV, at its policy's page formats: the scheduler reserves it.
  turn.predicted_kv_bytes =
      engine_->KvGrowthBound(conversation, to_prefill, prefill_chunk_tokens_, turn.max_new_tokens);
  turn.seed = sampling.seed;
}

Status EngineBackend::Step(std::span<StepItem> batch) {
  auto emit = [](StepItem& item, Sequence& seq, const rt::StepOutput& out) {
    item.emitted = true;
    item.text = out.delta;
    const rt::TurnResult& current = seq.conversation_->current();
    item.token_id = current.token_ids.empty() ? 0 : static_cast<uint32_t>(current.token_ids.back());
    if (!out.finished) return;
    switch (current.stats.stop_reason) {
      case engine::llm::StopReason::kStopToken:
        item.end_of_turn = true;  // its text is never shown
        item.text.clear();
        break;
      case engine::llm::StopReason::kStopString:
        item.stop_string = true;
        break;
      case engine::llm::StopReason::kMaxTokens:
      case engine::llm::StopReason::kNone:
      case engine::llm::StopReason::kCancelled:
        item.length_limit = true;
        break;
    }
  };
  // Prefill chunks of starting turns and decode tokens of running ones: ONE engine step, one
  // pass over the weights.
  std::vector<rt::StepWork> work;
  std::vector<StepItem*> work_items;
  for (StepItem& item : batch) {
    auto& seq = static_cast<Sequence&>(*item.sequence);
    rt::Conversation* c = seq.conversation_;
    if (c->starting()) {
      // The scheduler counts the same prompt tokens as the engine; should they ever disagree, a
      // starting turn still advances (never a decode item for it, which would fail the step).
      seq.started_ = true;
      work.push_back({c, std::max<int64_t>(item.prefill_tokens, 1)});
    } else if (c->decoding()) {
      work.push_back({c, 0});
    } else {
      item.status = InternalError("the turn's conversation is neither starting nor decoding");
      continue;
    }
    work_items.push_back(&item);
  }
  if (work.empty()) return absl::OkStatus();
  StatusOr<std::vector<rt::StepOutput>> outs = engine_->MixedStep(work);
  if (!outs.ok()) {
    for (StepItem* item : work_items) item->status = outs.status();
    return absl::OkStatus();
  }
  for (size_t i = 0; i < work_items.size(); ++i) {
    if (!(*outs)[i].status.ok()) {  // no KV pages for it: this turn fails, the others ran
      work_items[i]->status = (*outs)[i].status;
      continue;
    }
    if (!(*outs)[i].sampled) continue;  // a prompt chunk that was not the last
    emit(*work_items[i], static_cast<Sequence&>(*work_items[i]->sequence), (*outs)[i]);
  }
  return absl::OkStatus();
}

Status EngineBackend::Commit(const std::string& session_key, BackendSequence& sequence) {
  auto& seq = static_cast<Sequence&>(sequence);
  // The scheduler may end a turn (its own stop rules) while the engine still decodes it.
  if (seq.conversation_->decoding()) engine_->Cancel(*seq.conversation_);
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end() || it->second.released ||
        it->second.conversation.get() != seq.conversation_) {
      return FailedPreconditionError("session '{}' was released during its turn",
                                     SessionIdOfKey(session_key));
    }
    SessionState& state = it->second;
    state.messages_fed = seq.messages_total_ + 1;  // + the reply
    state.kv_bytes = seq.conversation_->kv_bytes();
    state.cached_tokens = static_cast<uint32_t>(seq.conversation_->cached_tokens());
    state.store_current = false;
    state.pending_media.insert(state.pending_media.end(), seq.media_hashes_.begin(),
                               seq.media_hashes_.end());
    seq.committed_ = true;
  }
  // The session is still busy (this turn holds it), so its conversation is ours to read.
  if (Status s = CommitToStore(session_key, *seq.conversation_); !s.ok()) {
    FZ_LOG_WARN(
        "session '{}': committing its KV to the store failed: {} (kept in engine memory; "
        "retried at the next turn and at drain)",
        SessionIdOfKey(session_key), MessageOf(s));
  }
  return absl::OkStatus();
}

std::string EngineBackend::CompressionConfig(const rt::Conversation& conversation) const {
  return fmt::format("policy={};kv={}", conversation.policy(), KvPrecisionName(Precision()));
}

Status EngineBackend::CommitToStore(const std::string& session_key,
                                    const rt::Conversation& conversation) {
  if (kv_cache_ == nullptr) return absl::OkStatus();
  engine::kv::SegmentMark since;
  std::vector<std::array<uint8_t, 32>> media;
  size_t messages = 0;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) return absl::OkStatus();
    since = it->second.mark;
    media = it->second.pending_media;
    messages = it->second.messages_fed;
  }
  FZ_ASSIGN_OR_RETURN(rt::ConversationSegment segment,
                      engine_->ExportConversation(conversation, since, kv_max_block_bytes_));
  FZ_RETURN_IF_ERROR(kv_cache_->CommitSegment(session_key, std::move(segment.encoded.blocks),
                                              segment.tokens, media,
                                              CompressionConfig(conversation), Precision()));
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_key);
  if (it != sessions_.end()) {
    it->second.mark = std::move(segment.encoded.next_mark);
    it->second.pending_media.clear();
    it->second.stored_messages = messages;
    it->second.store_current = true;
  }
  return absl::OkStatus();
}

Status EngineBackend::ReserveForRestore(const TurnRequest& request, KvReservations& kv,
                                        uint64_t bytes) {
  // Running turns were promised their KV: wait for room (they finish, idle sessions are
  // evicted) rather than take it, up to the turn's deadline or a minute.
  const Clock::time_point give_up =
      std::min(request.deadline, Clock::now() + std::chrono::seconds(60));
  for (;;) {
    if (kv.TryReserve(bytes)) return absl::OkStatus();
    EvictIdleSessions(bytes);
    if (kv.TryReserve(bytes)) return absl::OkStatus();
    if (request.cancel_flag && request.cancel_flag->load()) {
      return CancelledError("the client cancelled the call");
    }
    if (Clock::now() >= give_up) {
      return ResourceExhaustedError(
          "KV budget exceeded: restoring the session's {} bytes of KV found no room while other "
          "turns run; retry later",
          bytes);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

StatusOr<rt::RestoredConversation> EngineBackend::RestoreFromStore(const TurnRequest& request,
                                                                   KvReservations& kv,
                                                                   double* seconds, KvTier* tier) {
  const std::string& session_key = request.session_key;
  const auto t0 = Clock::now();
  FZ_ASSIGN_OR_RETURN(LoadedSessionKv loaded, kv_cache_->Load(session_key));
  std::vector<engine::kv::DecodedSegment> segments;
  segments.reserve(loaded.segments.size());
  for (const std::vector<std::string>& blocks : loaded.segments) {
    FZ_ASSIGN_OR_RETURN(engine::kv::DecodedSegment d, engine::kv::DecodeSegment(blocks));
    segments.push_back(std::move(d));
  }
  // The codec's bytes hold every page image whole (plus positions and headers): an upper bound
  // of the pages the restore allocates.
  FZ_RETURN_IF_ERROR(ReserveForRestore(request, kv, loaded.bytes));
  StatusOr<rt::RestoredConversation> attempt = engine_->RestoreConversation(segments);
  kv.Release(loaded.bytes);  // the pages, if any, now count as used
  if (!attempt.ok()) return attempt.status();
  rt::RestoredConversation restored = *std::move(attempt);
  *seconds = Seconds(Clock::now() - t0);
  switch (loaded.slowest_tier) {
    case kvstore::Tier::kHost:
      *tier = KvTier::kHost;
      break;
    case kvstore::Tier::kDisk:
      *tier = KvTier::kDisk;
      break;
    case kvstore::Tier::kRedis:
      *tier = KvTier::kRedis;
      break;
    case kvstore::Tier::kRemote:
      *tier = KvTier::kRemote;
      break;
  }
  FZ_LOG_INFO(
      "session '{}': restored {} tokens of KV from the store ({} segments, {} bytes, {} "
      "tier) in {:.3f} s",
      SessionIdOfKey(session_key), restored.conversation->cached_tokens(), segments.size(),
      loaded.bytes, KvTierName(*tier), *seconds);
  return restored;
}

void EngineBackend::EndTurn(const std::string& session_key) {
  bool released = false;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) return;
    it->second.busy = false;
    it->second.last_used = Clock::now();
    released = it->second.released;
  }
  // Released while this turn ran (DeleteSession): nothing of it is kept.
  if (released) ReleaseSession(session_key);
}

uint64_t EngineBackend::EvictIdleSessions(uint64_t bytes) {
  if (kv_cache_ == nullptr) return 0;
  std::vector<std::unique_ptr<rt::Conversation>> evicted;
  uint64_t freed = 0;
  {
    std::lock_guard lock(mu_);
    std::vector<std::pair<Clock::time_point, SessionState*>> idle;
    for (auto& [id, state] : sessions_) {
      if (state.conversation != nullptr && !state.busy && state.store_current) {
        idle.emplace_back(state.last_used, &state);
      }
    }
    std::sort(idle.begin(), idle.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [when, state] : idle) {
      if (freed >= bytes) break;
      freed += state->conversation->kv_bytes();
      evicted.push_back(std::move(state->conversation));
    }
  }
  if (!evicted.empty()) {
    FZ_LOG_INFO("KV budget: evicted {} idle sessions ({} bytes) to the KV store", evicted.size(),
                freed);
  }
  return freed;  // the conversations (and their pages) are freed here
}

void EngineBackend::DropConversation(const std::string& session_key, rt::Conversation* expected) {
  std::unique_ptr<rt::Conversation> dropped;
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_key);
  if (it == sessions_.end() || it->second.conversation.get() != expected) return;
  // The session's last committed state may be in the store: the next turn restores it. Without a
  // store (or before any commit) it starts over from the first message.
  dropped = std::move(it->second.conversation);
  if (kv_cache_ == nullptr || kv_cache_->segments(session_key) == 0) {
    it->second.messages_fed = 0;
  }
  it->second.kv_bytes = 0;
}

std::vector<KvBytes> EngineBackend::ReleaseSession(const std::string& session_key) {
  return Release(session_key, /*keep_in_store=*/false);
}

std::vector<KvBytes> EngineBackend::ForgetSession(const std::string& session_key) {
  return Release(session_key, /*keep_in_store=*/true);
}

std::vector<KvBytes> EngineBackend::Release(const std::string& session_key, bool keep_in_store) {
  std::unique_ptr<rt::Conversation> conversation;
  uint64_t bytes = 0;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) return {};
    // A running turn holds a pointer to the conversation: its end (EndTurn) frees everything,
    // and Commit refuses to keep anything meanwhile.
    if (it->second.busy) {
      it->second.released = true;
      return {};
    }
    bytes = it->second.conversation != nullptr ? it->second.kv_bytes : 0;
    conversation = std::move(it->second.conversation);
    sessions_.erase(it);
  }
  std::vector<KvBytes> freed;
  if (bytes > 0) freed.push_back({KvTier::kDevice, Precision(), bytes});
  if (kv_cache_ != nullptr) {
    for (const KvBytes& b : kv_cache_->Release(session_key, keep_in_store)) freed.push_back(b);
  }
  return freed;
}

std::vector<KvBytes> EngineBackend::SessionKv(const std::string& session_key) const {
  std::vector<KvBytes> out;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) return {};
    if (it->second.conversation != nullptr && it->second.kv_bytes > 0) {
      // By page format as of the conversation's last turn (a compressing policy mixes f16, int4
      // and int2 pages); the total alone when no breakdown is known (a restored conversation).
      const engine::kv::KvBytesByFormat& by_format =
          it->second.conversation->current().stats.kv_bytes_by_format;
      uint64_t known = 0;
      for (size_t f = 0; f < by_format.size(); ++f) {
        if (by_format[f] == 0) continue;
        known += by_format[f];
        out.push_back(
            {KvTier::kDevice, PrecisionOf(static_cast<engine::kv::KvFormat>(f)), by_format[f]});
      }
      if (known != it->second.kv_bytes) {
        out.clear();
        out.push_back({KvTier::kDevice, Precision(), it->second.kv_bytes});
      }
    }
  }
  if (kv_cache_ != nullptr) {
    for (const KvBytes& b : kv_cache_->Bytes(session_key)) out.push_back(b);
  }
  return out;
}

SharedKvState EngineBackend::ExportSharedKv(const std::string& session_key) {
  SharedKvState out;
  if (kv_cache_ == nullptr) return out;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(session_key);
    if (it == sessions_.end()) return out;
    out.stored_messages = it->second.stored_messages;
  }
  out.precision = Precision();
  out.segments = kv_cache_->SharedSegments(session_key);
  if (out.segments.empty()) out.stored_messages = 0;
  return out;
}

Status EngineBackend::AdoptSharedKv(const std::string& session_key, const SharedKvState& kv) {
  if (kv_cache_ == nullptr) return absl::OkStatus();
  std::unique_ptr<rt::Conversation> stale;
  {
    std::lock_guard lock(mu_);
    SessionState& state = sessions_[session_key];
    if (state.busy) {
      return FailedPreconditionError("session '{}' has a turn running on this replica",
                                     SessionIdOfKey(session_key));
    }
    // Whatever this replica held of the session is behind the store's revision: the next turn
    // restores the store's KV (or re-prefills when it has none).
    stale = std::move(state.conversation);
    state.messages_fed = kv.segments.empty() ? 0 : kv.stored_messages;
    state.stored_messages = state.messages_fed;
    state.kv_bytes = 0;
    state.cached_tokens = 0;
    state.store_current = true;
    state.mark = {};
    state.pending_media.clear();
  }
  kv_cache_->Adopt(session_key, kv.segments, kv.precision);
  return absl::OkStatus();
}

KvStoreHealth EngineBackend::StoreHealth() {
  if (kv_cache_ == nullptr) return {};
  return kv_cache_->Health();
}

uint32_t EngineBackend::SessionCachedTokens(const std::string& session_key) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(session_key);
  return it == sessions_.end() ? 0 : it->second.cached_tokens;
}

// What the engine's budget holds: pages in use and AttentionPack's low-rank blocks (charged to
// the same budget). Pages alone under-count a session whose visual tokens are in blocks, and the
// scheduler would admit turns whose pages the engine then refuses mid-prefill.
uint64_t EngineBackend::KvUsedBytes() const {
  return static_cast<uint64_t>(engine_->kv_pool().used_bytes());
}

Status EngineBackend::FlushSessions() {
  if (kv_cache_ == nullptr) {
    std::lock_guard lock(mu_);
    if (!sessions_.empty()) {
      FZ_LOG_WARN("drain: {} sessions' KV not flushed (kvstore: none)", sessions_.size());
    }
    return absl::OkStatus();
  }
  // Sessions whose last commit to the store failed get another try (no turn runs any more).
  std::vector<std::pair<std::string, rt::Conversation*>> behind;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, state] : sessions_) {
      if (state.conversation != nullptr && !state.store_current && !state.busy &&
          state.messages_fed > 0) {
        behind.emplace_back(id, state.conversation.get());
      }
    }
  }
  Status first_error;
  for (const auto& [id, conversation] : behind) {
    if (Status s = CommitToStore(id, *conversation); !s.ok()) {
      FZ_LOG_ERROR("drain: session '{}' KV not flushed: {}", SessionIdOfKey(id), MessageOf(s));
      first_error.Update(s);
    }
  }
  StatusOr<FlushReport> report = kv_cache_->Flush();
  if (!report.ok()) return report.status();
  FZ_LOG_INFO("drain: session KV flushed to the store: {} sessions, {} blocks, {} bytes",
              report->sessions, report->blocks, report->bytes);
  return first_error;
}

}  // namespace framezip::server
