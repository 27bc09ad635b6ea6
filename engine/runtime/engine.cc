#include "engine/runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/logging.h"
#include "engine/core/thread_pool.h"
#include "engine/vision/llava_vision.h"

namespace framezip::engine::runtime {
namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string: those bytes
// are held back from streaming until it is clear they do not start a stop string.
size_t HeldBackBytes(const std::string& text, const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& s : stops) {
    for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), text.size()); n > held; --n) {
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        held = n;
        break;
      }
    }
  }
  return held;
}

}  // namespace

struct Engine::PreparedTurn {
  std::vector<int32_t> ids;  // everything to prefill, in order
  Tensor embeds;             // [ids.size(), H]
  int64_t prompt_tokens = 0;
  int64_t visual_tokens = 0;
  double vision_ms = 0;
};

Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::Load(const std::filesystem::path& dir,
                                               const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = options;
  if (options.threads > 0) SetComputeThreads(options.threads);
  FZ_ASSIGN_OR_RETURN(e->config_, model::LoadLlavaConfig(dir));
  FZ_ASSIGN_OR_RETURN(e->preprocessor_, model::LoadPreprocessorConfig(dir));
  FZ_ASSIGN_OR_RETURN(e->weights_, model::ModelWeights::Load(dir, e->config_));
  FZ_ASSIGN_OR_RETURN(e->tokenizer_, model::Tokenizer::FromFile(dir / "tokenizer.json"));
  auto tmpl = model::ChatTemplate::Load(dir);
  if (tmpl.ok()) {
    e->template_ = std::make_unique<model::ChatTemplate>(*tmpl);
  } else if (absl::IsNotFound(tmpl.status())) {
    FZ_LOG_WARN("{}: no chat template, using the llava-onevision one", dir.string());
    e->template_ = std::make_unique<model::ChatTemplate>(
        model::ChatTemplate::OfKind(model::ChatTemplateKind::kLlavaOnevision));
  } else {
    return tmpl.status();
  }
  FZ_ASSIGN_OR_RETURN(e->vision_weights_, vision::BindLlavaVisionWeights(e->config_, e->weights_));
  FZ_ASSIGN_OR_RETURN(llm::DecoderWeights dw,
                      llm::DecoderWeightsFromModel(e->weights_, e->config_.text));
  FZ_ASSIGN_OR_RETURN(e->decoder_, llm::Decoder::Create(e->config_.text, std::move(dw)));
  const kv::PageLayout layout = e->decoder_->KvLayout(options.kv_format, options.kv_page_tokens);
  const int64_t max_pages =
      std::max<int64_t>(1, options.kv_max_bytes / static_cast<int64_t>(layout.PageBytes()));
  FZ_ASSIGN_OR_RETURN(e->pool_, kv::PagePool::Create(layout, max_pages));
  // What the template writes after an assistant reply (e.g. "<|im_end|>\n"): fed before the next
  // turn's messages so the cache holds exactly the rendered conversation.
  const std::vector<model::ChatMessage> probe = {{"assistant", {model::ChatContent::Text("\x01")}}};
  FZ_ASSIGN_OR_RETURN(const std::string rendered, e->template_->Render(probe, false));
  const size_t at = rendered.find('\x01');
  e->assistant_close_ = at == std::string::npos ? "" : rendered.substr(at + 1);
  FZ_LOG_INFO("engine: loaded {} ({} layers, hidden {}, vocab {}), KV {} pages of {} tokens ({})",
              dir.string(), e->config_.text.num_hidden_layers, e->config_.text.hidden_size,
              e->config_.text.vocab_size, max_pages, layout.page_tokens,
              kv::KvFormatName(layout.format));
  return e;
}

StatusOr<std::unique_ptr<Conversation>> Engine::NewConversation(std::string_view policy) {
  std::unique_ptr<Conversation> c(new Conversation());
  c->policy_ = policy.empty() ? options_.default_policy : std::string(policy);
  FZ_ASSIGN_OR_RETURN(c->sequence_, decoder_->NewSequence(pool_.get(), c->policy_));
  return c;
}

StatusOr<Tensor> Engine::EncodeVisual(const VisualInput& v, int64_t expected_rows) const {
  const int64_t s = image_size();
  if (v.pixels.rank() != 4 || v.pixels.dim(1) != 3 || v.pixels.dim(2) != s ||
      v.pixels.dim(3) != s || v.pixels.dtype() != DType::kF32) {
    return InvalidArgumentError("visual input has shape {} ({}), want [N, 3, {}, {}] f32",
                                ShapeString(v.pixels.shape()), DTypeName(v.pixels.dtype()), s, s);
  }
  StatusOr<Tensor> rows;
  if (v.kind == VisualInput::Kind::kVideo) {
    rows = vision::EncodeVideo(config_, vision_weights_, v.pixels);
  } else if (v.original_height > 0 && v.original_width > 0) {
    rows = vision::EncodeImageAnyres(config_, vision_weights_, v.pixels, v.original_height,
                                     v.original_width);
  } else {
    rows = vision::EncodeImagesBaseResolution(config_, vision_weights_, v.pixels);
  }
  if (!rows.ok()) return rows.status();
  if (rows->dim(0) != expected_rows) {
    return InternalError("vision produced {} rows for {} placeholders", rows->dim(0),
                         expected_rows);
  }
  return rows;
}

StatusOr<Engine::PreparedTurn> Engine::Prepare(Conversation& c, std::span<const Message> messages) {
  if (messages.empty()) return InvalidArgumentError("a turn needs at least one message");
  std::vector<model::ChatMessage> chat;
  std::vector<int64_t> image_counts, video_counts;
  std::vector<const VisualInput*> images, videos;
  for (const Message& m : messages) {
    model::ChatMessage cm{m.role, {}};
    for (const VisualInput& v : m.visuals) {
      if (!v.pixels.defined() || v.pixels.rank() != 4) {
        return InvalidArgumentError("visual input has shape {}, want [N, 3, S, S]",
                                    ShapeString(v.pixels.shape()));
      }
      if (v.kind == VisualInput::Kind::kVideo) {
        cm.content.push_back(model::ChatContent::Video());
        FZ_ASSIGN_OR_RETURN(const int64_t n, vision::VideoTokenCount(config_, v.pixels.dim(0)));
        video_counts.push_back(n);
        videos.push_back(&v);
      } else {
        cm.content.push_back(model::ChatContent::Image());
        int64_t n = vision::BaseImageTokenCount(config_);
        if (v.original_height > 0 && v.original_width > 0) {
          FZ_ASSIGN_OR_RETURN(
              n, vision::AnyresImageTokenCount(config_, v.original_height, v.original_width));
        }
        image_counts.push_back(n);
        images.push_back(&v);
      }
    }
    cm.content.push_back(model::ChatContent::Text(m.text));
    chat.push_back(std::move(cm));
  }
  FZ_ASSIGN_OR_RETURN(const std::string rendered, template_->Render(chat, true));
  FZ_ASSIGN_OR_RETURN(const std::string expanded,
                      model::ExpandVisualPlaceholders(rendered, image_counts, video_counts));
  FZ_ASSIGN_OR_RETURN(std::vector<int32_t> prompt,
                      tokenizer_->Encode(expanded, /*add_special_tokens=*/c.first_turn_));

  PreparedTurn p;
  if (!c.first_turn_) {
    // Close the previous reply as the template would have rendered it. A reply that ended on a
    // stop token already has that token as the close's first token, so it is not fed twice.
    const bool ended_on_stop = c.current_.stats.stop_reason == llm::StopReason::kStopToken;
    if (!ended_on_stop) p.ids = c.pending_;
    FZ_ASSIGN_OR_RETURN(std::vector<int32_t> close, tokenizer_->Encode(assistant_close_, false));
    p.ids.insert(p.ids.end(), close.begin(), close.end());
  }
  p.prompt_tokens = static_cast<int64_t>(prompt.size());
  p.ids.insert(p.ids.end(), prompt.begin(), prompt.end());
  FZ_ASSIGN_OR_RETURN(p.embeds, decoder_->Embed(p.ids));

  // Visual features replace the placeholder rows, images and videos each in order.
  const double t0 = NowMs();
  const int64_t hid = config_.text.hidden_size;
  for (const auto& [inputs, counts, token] :
       {std::tuple{&images, &image_counts, config_.image_token_id},
        std::tuple{&videos, &video_counts, config_.video_token_id}}) {
    std::vector<int64_t> rows_at;
    for (size_t i = 0; i < p.ids.size(); ++i) {
      if (p.ids[i] == token) rows_at.push_back(static_cast<int64_t>(i));
    }
    int64_t want = 0;
    for (int64_t n : *counts) want += n;
    if (static_cast<int64_t>(rows_at.size()) != want) {
      return InvalidArgumentError(
          "the prompt has {} placeholder tokens (id {}) for visual inputs needing {}; do not write "
          "<image>/<video> in the text",
          rows_at.size(), token, want);
    }
    size_t next = 0;
    for (size_t k = 0; k < inputs->size(); ++k) {
      FZ_ASSIGN_OR_RETURN(Tensor rows, EncodeVisual(*(*inputs)[k], (*counts)[k]));
      for (int64_t r = 0; r < rows.dim(0); ++r) {
        std::memcpy(p.embeds.data<float>() + rows_at[next++] * hid, rows.data<float>() + r * hid,
                    static_cast<size_t>(hid) * sizeof(float));
      }
    }
    p.visual_tokens += want;
  }
  p.vision_ms = NowMs() - t0;
  return p;
}

StatusOr<StepOutput> Engine::StartTurn(Conversation& c, std::span<const Message> messages,
                                       const TurnOptions& options) {
  if (c.decoding_) return FailedPreconditionError("the conversation is still decoding a turn");
  FZ_RETURN_IF_ERROR(llm::ValidateSamplingParams(options.sampling));
  const double start = NowMs();
  llm::SamplingParams sp = options.sampling;
  for (int64_t id : config_.generation.eos_token_ids) {
    if (std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), id) ==
        sp.stop_token_ids.end()) {
      sp.stop_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  const int64_t cached = c.sequence_->length;
  FZ_ASSIGN_OR_RETURN(PreparedTurn p, Prepare(c, messages));

  const double t_prefill = NowMs();
  FZ_ASSIGN_OR_RETURN(
      Tensor logits,
      decoder_->Prefill(*c.sequence_, p.embeds,
                        llm::PrefillOptions{.chunk_tokens = options_.prefill_chunk_tokens}));
  const double prefill_ms = NowMs() - t_prefill;
  c.history_.insert(c.history_.end(), p.ids.begin(), p.ids.end());
  c.pending_.clear();
  c.first_turn_ = false;

  c.current_ = TurnResult();
  TurnStats& st = c.current_.stats;
  st.policy = c.policy_;
  st.prompt_tokens = p.prompt_tokens;
  st.prefilled_tokens = static_cast<int64_t>(p.ids.size());
  st.cached_tokens = cached;
  st.visual_tokens = p.visual_tokens;
  st.vision_ms = p.vision_ms;
  st.prefill_ms = prefill_ms;
  c.sampler_ = std::make_unique<llm::Sampler>(sp);
  c.stop_ = std::make_unique<llm::StopCondition>(sp);
  c.detok_ = std::make_unique<model::StreamingDecoder>(*tokenizer_, /*skip_special_tokens=*/true);
  c.raw_text_.clear();
  c.emitted_bytes_ = 0;
  c.turn_start_ms_ = start;
  c.decoding_ = true;

  const int32_t token = c.sampler_->Sample(
      std::span<float>(logits.data<float>(), static_cast<size_t>(logits.dim(1))), c.history_);
  st.ttft_ms = NowMs() - start;
  return Accept(c, token);
}

StepOutput Engine::Accept(Conversation& c, int32_t token) {
  TurnResult& r = c.current_;
  r.token_ids.push_back(token);
  c.history_.push_back(token);
  c.pending_ = {token};
  c.next_token_ = token;
  const int generated = static_cast<int>(r.token_ids.size());
  size_t text_end = std::string::npos;
  llm::StopReason reason = c.stop_->Check(token, generated, c.raw_text_, &text_end);
  if (reason != llm::StopReason::kStopToken) {
    // A stop token's text is never shown; any other token's is, up to a stop string.
    c.raw_text_ += c.detok_->Push(token);
    reason = c.stop_->Check(token, generated, c.raw_text_, &text_end);
  }
  StepOutput out;
  out.finished = reason != llm::StopReason::kNone;
  size_t visible;
  if (out.finished) {
    if (reason != llm::StopReason::kStopString) c.raw_text_ += c.detok_->Finish();
    visible = reason == llm::StopReason::kStopString ? text_end : c.raw_text_.size();
  } else {
    visible = c.raw_text_.size() - HeldBackBytes(c.raw_text_, c.stop_->stop_strings());
  }
  if (visible > c.emitted_bytes_) {
    out.delta = c.raw_text_.substr(c.emitted_bytes_, visible - c.emitted_bytes_);
    c.emitted_bytes_ = visible;
  }
  r.text = c.raw_text_.substr(0, std::min(visible, c.raw_text_.size()));
  r.stats.generated_tokens = generated;
  if (out.finished) {
    r.stats.stop_reason = reason;
    r.stats.kv_bytes = c.sequence_->kv.bytes();
    r.stats.decode_tokens_per_s =
        r.stats.decode_ms > 0 ? (generated - 1) * 1000.0 / r.stats.decode_ms : 0;
    c.decoding_ = false;
  }
  return out;
}

StatusOr<std::vector<StepOutput>> Engine::Step(std::span<Conversation* const> conversations) {
  std::vector<llm::Sequence*> seqs;
  std::vector<int32_t> tokens;
  for (Conversation* c : conversations) {
    if (!c->decoding_) return FailedPreconditionError("Step: a conversation is not decoding");
    seqs.push_back(c->sequence_.get());
    tokens.push_back(c->next_token_);
  }
  const double t0 = NowMs();
  FZ_ASSIGN_OR_RETURN(Tensor logits, decoder_->DecodeStep(seqs, tokens));
  const double step_ms = NowMs() - t0;
  std::vector<StepOutput> outs;
  const int64_t v = logits.dim(1);
  for (size_t b = 0; b < conversations.size(); ++b) {
    Conversation& c = *conversations[b];
    c.pending_.clear();  // the token just went into the cache
    c.current_.stats.decode_ms += step_ms;
    const int32_t token = c.sampler_->Sample(
        std::span<float>(logits.data<float>() + b * v, static_cast<size_t>(v)), c.history_);
    outs.push_back(Accept(c, token));
  }
  return outs;
}

void Engine::Cancel(Conversation& c) {
  if (!c.decoding_) return;
  c.decoding_ = false;
  c.current_.stats.stop_reason = llm::StopReason::kCancelled;
  c.current_.stats.kv_bytes = c.sequence_->kv.bytes();
}

StatusOr<TurnResult> Engine::RunTurn(Conversation& c, std::span<const Message> messages,
                                     const TurnOptions& options,
                                     const std::function<void(std::string_view)>& on_text,
                                     const std::atomic<bool>* cancel) {
  FZ_ASSIGN_OR_RETURN(StepOutput first, StartTurn(c, messages, options));
  if (on_text && !first.delta.empty()) on_text(first.delta);
  Conversation* batch[] = {&c};
  while (c.decoding_) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      Cancel(c);
      return CancelledError("turn cancelled after {} tokens", c.current_.token_ids.size());
    }
    FZ_ASSIGN_OR_RETURN(std::vector<StepOutput> outs, Step(batch));
    if (on_text && !outs[0].delta.empty()) on_text(outs[0].delta);
  }
  return c.current_;
}

}  // namespace framezip::engine::runtime
