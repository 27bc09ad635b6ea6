#include "server/engine_backend.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <thread>

#include "common/logging.h"
#include "engine/core/device.h"
#include "engine/core/device_memory_info.h"
#include "engine/runtime/engine.h"
#include "engine/vision/llava_vision.h"
#include "media/media.h"
#include "server/media_probe.h"
#include "server/preprocess_spec.h"

namespace framezip::server {

namespace rt = engine::runtime;

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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
      if (started_ && !session_key_.empty()) {
        owner_->sessions_->DropConversation(session_key_, conversation_);
      }
    }
    if (holds_session_) owner_->sessions_->EndTurn(session_key_);
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
  FZ_ASSIGN_OR_RETURN(options.weight_format, rt::ParseWeightFormat(config.weight_format));
  FZ_ASSIGN_OR_RETURN(options.vision_weight_format,
                      rt::ParseWeightFormat(config.vision_weight_format));
  options.kv_max_bytes = config.kv_budget_bytes > 0 ? config.kv_budget_bytes : int64_t{1} << 30;
  options.memory_budget_bytes = config.memory_budget_bytes;
  if (config.gpu_memory_utilization > 0) {
    FZ_ASSIGN_OR_RETURN(const engine::DeviceMemoryInfo memory,
                        engine::QueryDeviceMemoryInfo(options.device));
    options.memory_budget_bytes = static_cast<int64_t>(config.gpu_memory_utilization *
                                                       static_cast<double>(memory.total_bytes));
  }
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
  ModelDescription& m = b->model_;
  m.name = std::filesystem::path(config.model_dir).lexically_normal().filename().string();
  if (m.name.empty()) m.name = std::filesystem::path(config.model_dir).parent_path().filename();
  m.architecture = c.model_type;
  m.text_architecture = c.text.model_type;
  m.vision_architecture = c.vision.model_type;
  m.context_tokens = static_cast<uint32_t>(c.text.max_position_embeddings);
  m.vocab_size = static_cast<uint32_t>(c.text.vocab_size);
  m.weight_dtype = c.torch_dtype;
  // A checkpoint stored in int8 runs int8 whatever --weight-format asks of 16-bit weights; fp8
  // on a GPU without FP8 GEMMs runs bf16 (the engine's options say what it loaded).
  m.weight_format = c.stored_quantization == engine::model::StoredQuantization::kInt8PerChannel
                        ? std::string(rt::WeightFormatName(rt::WeightFormat::kInt8))
                        : std::string(rt::WeightFormatName(b->engine_->options().weight_format));
  m.device = config.device;
  m.weight_bytes = b->engine_->weight_bytes();
  // What a memory budget left the pool, or kv_max_bytes as given.
  m.kv_budget_bytes = static_cast<uint64_t>(b->engine_->options().kv_max_bytes);
  // Every policy this model can run (dynamic_llava needs the model's predictors).
  for (PolicyKind kind : {PolicyKind::kNone, PolicyKind::kZipVl, PolicyKind::kAttentionPack,
                          PolicyKind::kDynamicLlava, PolicyKind::kFastV, PolicyKind::kKivi,
                          PolicyKind::kZipVlAttentionPack}) {
    if (b->engine_->NewConversation(PolicyName(kind)).ok()) m.policies.push_back(kind);
  }
  m.vision.image_size = static_cast<uint32_t>(c.vision.image_size);
  m.vision.patch_size = static_cast<uint32_t>(c.vision.patch_size);
  for (double v : b->engine_->preprocessor().image_mean) m.vision.image_mean.push_back(float(v));
  for (double v : b->engine_->preprocessor().image_std) m.vision.image_std.push_back(float(v));
  // Visual tokens as the engine expands them (LLaVA-OneVision video: the patch grid pooled 2x2
  // per frame plus one newline per video; images: the selected patches plus a newline).
  m.vision.tokens_per_image = static_cast<uint32_t>(engine::vision::BaseImageTokenCount(c));
  if (!ImagePreprocessSpecFor(b->engine_->preprocessor(), c, /*sole_image=*/true)
           .anyres_pinpoints.empty()) {
    m.vision.sole_image_tokens = [c, base = m.vision.tokens_per_image](uint32_t h, uint32_t w) {
      const StatusOr<int64_t> n = engine::vision::AnyresImageTokenCount(c, h, w);
      return n.ok() ? static_cast<uint32_t>(*n) : base;
    };
  }
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
  FZ_ASSIGN_OR_RETURN(b->sessions_, server::SessionKv::Open(config, model_id, b->engine_.get()));
  FZ_LOG_INFO("engine: loaded {} ({}, {} layers, context {}), session KV store: {}", m.name,
              m.architecture, c.text.num_hidden_layers, m.context_tokens, config.kvstore);
  return b;
}

EngineBackend::~EngineBackend() {
  sessions_.reset();  // the commit worker and the conversations, before the engine
}

// Prepare, step by step: the session's conversation (restored from the store when it was
// evicted), the new messages' media, the sampling options, then rendering/tokenizing/vision in
// the engine, and the figures the scheduler admits the turn by.
StatusOr<PreparedTurn> EngineBackend::Prepare(const TurnRequest& request, KvReservations& kv) {
  auto seq = std::make_unique<Sequence>();
  seq->owner_ = this;
  seq->session_key_ = request.session_key;
  PreparedTurn turn;
  size_t first_new = 0;
  if (request.session_key.empty()) {  // stateless (Generate): a conversation of its own
    FZ_ASSIGN_OR_RETURN(seq->owned_, engine_->NewConversation(request.policy));
    seq->conversation_ = seq->owned_.get();
  } else {
    FZ_ASSIGN_OR_RETURN(const server::SessionKv::Attached attached,
                        sessions_->Attach(request, kv, turn));
    seq->holds_session_ = true;  // from here the sequence's end lets go of the session
    seq->conversation_ = attached.conversation;
    seq->kv_at_start_ = attached.kv_bytes;
    first_new = attached.first_new;
  }
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

Status EngineBackend::DecodeNewMedia(const TurnRequest& request, size_t first_new, Sequence& seq,
                                     PreparedTurn& turn) {
  const auto t0 = Clock::now();
  // An image is tiled (anyres) when it is the only one of the turn's new messages, as the
  // processor tiles the only image of a sample (server/preprocess_spec.h).
  size_t images = 0;
  for (size_t i = first_new; i < request.messages.size(); ++i) {
    for (const ContentPart& part : request.messages[i].content) {
      if (part.media_id.empty()) continue;
      auto it = std::find_if(request.media.begin(), request.media.end(),
                             [&](const MediaInfo& mi) { return mi.media_id == part.media_id; });
      if (it != request.media.end() && it->kind == MediaKind::kImage) ++images;
    }
  }
  const bool sole_image = images == 1;
  const media::PreprocessSpec video_spec =
      PreprocessSpecFor(engine_->preprocessor(), engine_->image_size());
  const media::PreprocessSpec image_spec =
      ImagePreprocessSpecFor(engine_->preprocessor(), engine_->config(), sole_image);
  // Whether this turn's image is cut into tiles (the engine then needs its original size).
  const bool tiled = !image_spec.anyres_pinpoints.empty();
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
      const bool image = it->kind == MediaKind::kImage;
      const media::PreprocessSpec& spec = image ? image_spec : video_spec;
      const media::FrameSamplingSpec sampling = ChatSampling(*it);
      media::MediaLimits limits = media_limits_;
      limits.max_frames = std::max(limits.max_frames, sampling.num_frames);
      // An image's tiles are frames of the reply, not sampled ones: never refused by the cap.
      if (image && tiled) {
        limits.max_frames = std::max(limits.max_frames, MaxAnyresFrames(spec));
      }
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
      visual.kind = image ? rt::VisualInput::Kind::kImage : rt::VisualInput::Kind::kVideo;
      visual.pixels = std::move(pixels);
      uint32_t visual_tokens = it->visual_tokens;
      if (image) {
        visual_tokens =
            static_cast<uint32_t>(engine::vision::BaseImageTokenCount(engine_->config()));
      }
      if (image && tiled) {
        visual.original_height = decoded->info.height;
        visual.original_width = decoded->info.width;
        // An extreme aspect ratio can leave no feature row after unpadding: refused here, naming
        // the media, before any prefill.
        StatusOr<int64_t> tokens = engine::vision::AnyresImageTokenCount(
            engine_->config(), decoded->info.height, decoded->info.width);
        if (!tokens.ok()) return Annotate(tokens.status(), fmt::format("image '{}'", it->name));
        visual_tokens = static_cast<uint32_t>(*tokens);
      }
      out.visuals.push_back(std::move(visual));
      turn.visual_tokens_before_pruning += visual_tokens;
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
  // The engine's stop decision, passed on as it is: the scheduler applies it.
  auto emit = [](StepItem& item, Sequence& seq, const rt::StepOutput& out) {
    item.emitted = true;
    item.text = out.delta;
    item.withheld_bytes = static_cast<uint32_t>(out.withheld_bytes);
    const rt::TurnResult& current = seq.conversation_->current();
    item.token_id = current.token_ids.empty() ? 0 : static_cast<uint32_t>(current.token_ids.back());
    switch (out.stop_reason) {
      case engine::llm::StopReason::kNone:
        item.stop = out.finished ? StopCause::kLength : StopCause::kNone;
        break;
      case engine::llm::StopReason::kStopToken:
        item.stop = StopCause::kStopToken;
        break;
      case engine::llm::StopReason::kStopString:
        item.stop = StopCause::kStopString;
        break;
      case engine::llm::StopReason::kMaxTokens:
      case engine::llm::StopReason::kCancelled:
        item.stop = StopCause::kLength;
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
  // The scheduler may end a turn (a cancellation, a deadline) while the engine still decodes it.
  if (seq.conversation_->decoding()) engine_->Cancel(*seq.conversation_);
  FZ_RETURN_IF_ERROR(
      sessions_->KeepTurn(session_key, *seq.conversation_, seq.messages_total_, seq.media_hashes_));
  seq.committed_ = true;
  return absl::OkStatus();
}

// What the engine's budget holds: pages in use and AttentionPack's low-rank blocks (charged to
// the same budget). Pages alone under-count a session whose visual tokens are in blocks, and the
// scheduler would admit turns whose pages the engine then refuses mid-prefill.
uint64_t EngineBackend::KvUsedBytes() const {
  return static_cast<uint64_t>(engine_->kv_pool().used_bytes());
}

}  // namespace framezip::server
