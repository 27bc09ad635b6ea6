#include "engine/runtime/engine.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "common/logging.h"
#include "engine/core/device_memory_info.h"
#include "engine/core/thread_pool.h"
#include "engine/kv/quant_page.h"
#include "engine/llm/quantized_projections.h"
#include "engine/ops/row_slices.h"
#include "engine/ops/sample.h"
#include "engine/runtime/decoder_loading.h"
#include "engine/runtime/predictor_loading.h"
#include "engine/runtime/weight_bytes.h"
#include "engine/vision/llava_vision.h"
#include "engine/vision/projector.h"
#include "engine/vision/vision_tower.h"

namespace framezip::engine::runtime {
namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The figures of a turn that the sequence and its policy keep: KV held, and what the policy kept,
// removed and gated.
void FillKvStats(const llm::Sequence& seq, const model::TextConfig& text, TurnStats& st) {
  const compress::PrefillStats& ps = seq.prefill_stats;
  st.layer_kept_ratio = ps.KeptRatios();
  st.selection_overhead_ms = ps.selection_ms;
  st.layer_visual_tokens = ps.visual;
  int64_t removed_row_layers = 0;
  for (const int64_t ran : ps.tokens) removed_row_layers += std::max<int64_t>(ps.fed - ran, 0);
  const double h = static_cast<double>(text.hidden_size);
  const double linear_flops_per_row =
      2.0 * (2.0 * h * static_cast<double>(text.num_attention_heads * text.head_dim) +
             2.0 * h * static_cast<double>(text.kv_dim()) +
             3.0 * h * static_cast<double>(text.intermediate_size));
  st.prefill_flops_saved = static_cast<double>(removed_row_layers) * linear_flops_per_row;
  const int64_t row_layers = ps.fed * static_cast<int64_t>(ps.tokens.size());
  st.prefill_flops_saved_ratio =
      row_layers > 0 ? static_cast<double>(removed_row_layers) / static_cast<double>(row_layers)
                     : 0;
  st.text_tokens_gated = ps.decode_unstored;
  st.low_rank_build_ms = ps.low_rank_build_ms;
  st.low_rank_attend_ms = ps.low_rank_attend_ms;
  int64_t lr_tokens = 0;
  double key_ranks = 0, value_ranks = 0;
  for (int l = 0; l < seq.kv.num_layers(); ++l) {
    for (const kv::LowRankBlock& b : seq.kv.low_rank_blocks(l)) {
      lr_tokens += b.tokens();
      key_ranks += static_cast<double>(b.keys.rank) * static_cast<double>(b.tokens());
      for (const int32_t r : b.value_ranks) value_ranks += r;
    }
  }
  st.low_rank_tokens = lr_tokens;
  st.low_rank_key_rank = lr_tokens > 0 ? key_ranks / static_cast<double>(lr_tokens) : 0;
  st.low_rank_value_rank_mean = lr_tokens > 0 ? value_ranks / static_cast<double>(lr_tokens) : 0;
  st.kv_bytes = seq.kv.bytes();
  st.kv_bytes_by_format = seq.kv.bytes_by_format();
  const double f16_bytes = static_cast<double>(seq.length) *
                           static_cast<double>(text.num_hidden_layers) * 4.0 *
                           static_cast<double>(text.kv_dim());
  st.compression_ratio = st.kv_bytes > 0 ? f16_bytes / static_cast<double>(st.kv_bytes) : 1;
}

// Logits on the host, for callers that read them (ScoreTurn); a no-op for a CPU engine.
StatusOr<Tensor> OnHost(StatusOr<Tensor> t) {
  if (!t.ok() || t->device().is_cpu()) return t;
  return t->To(Device::Cpu());
}

}  // namespace

namespace internal {

struct PreparedTurn {
  std::vector<int32_t> ids;  // everything to prefill, in order
  // Leading ids already in the conversation's history: the previous reply's last token, which
  // was recorded when it was sampled and is fed only now (it did not end on a stop token).
  size_t recorded = 0;
  Tensor embeds;  // [ids.size(), H]
  int64_t prompt_tokens = 0;
  int64_t visual_tokens = 0;
  std::vector<uint8_t> visual;  // [ids.size()] 1 at rows filled with visual features
  double vision_ms = 0;
};

// A turn between BeginTurn and FinishStart.
struct TurnStart {
  PreparedTurn prepared;
  llm::SamplingParams sampling;  // with the model's eos ids added
  double start_ms = 0;
  int64_t cached = 0;  // tokens in the cache before the turn
  // Chunked starts (MixedStep): prompt rows prefilled so far, and the time of their steps.
  int64_t fed = 0;
  double prefill_ms = 0;
};

}  // namespace internal

Conversation::~Conversation() = default;

int64_t Conversation::prefill_remaining() const {
  return start_ != nullptr ? static_cast<int64_t>(start_->prepared.ids.size()) - start_->fed : 0;
}

Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::Load(const std::filesystem::path& dir,
                                               const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = options;
  FZ_RETURN_IF_ERROR(CheckWeightFormat(options.weight_format, options.device));
  FZ_RETURN_IF_ERROR(
      Annotate(CheckWeightFormat(options.vision_weight_format, options.device), "vision tower"));
  if (options.vision_weight_format == WeightFormat::kFp8) {
    return UnimplementedError(
        "vision weight format fp8 is not offered: use bf16, or int8 on the CPU (fp8 is the "
        "decoder's --weight-format)");
  }
  // fp8 asked of a GPU without FP8 GEMMs with per-channel scales: bf16, said here and in
  // options() (GetModelInfo's weight format).
  e->options_.weight_format = EffectiveWeightFormat(options.weight_format, options.device);
  if (e->options_.weight_format != options.weight_format) {
    FZ_LOG_WARN(
        "engine: weight format fp8 needs an sm_90 GPU for cuBLASLt's FP8 GEMMs; {} keeps "
        "bf16 weights",
        DeviceName(options.device));
  }
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
  if (options.vision_weight_format == WeightFormat::kInt8) {
    FZ_RETURN_IF_ERROR(QuantizeVisionProjections(e->vision_weights_.tower));
  }
  FZ_ASSIGN_OR_RETURN(llm::DecoderWeights dw,
                      DecoderWeightsFromModel(e->weights_, e->config_.text));
  if (e->options_.weight_format == WeightFormat::kInt8) {
    FZ_RETURN_IF_ERROR(llm::QuantizeProjectionsInt8(dw));
  } else if (e->options_.weight_format == WeightFormat::kFp8) {
    FZ_ASSIGN_OR_RETURN(const std::vector<std::string> kept, llm::QuantizeProjectionsFp8(dw));
    if (!kept.empty()) {
      FZ_LOG_WARN(
          "engine: {} projections keep 16-bit weights, their shapes unfit for FP8 GEMMs "
          "(in % 16, out % 4): {}",
          kept.size(), fmt::join(kept, ", "));
    }
  }
  FZ_ASSIGN_OR_RETURN(e->decoder_, CreateDecoder(e->config_.text, std::move(dw), options.device));
  e->decoder_->set_policy_resources(
      LoadPolicyResources(dir, e->config_.text.hidden_size, options.device));
  if (options.device.is_cpu()) {
    FZ_RETURN_IF_ERROR(vision::PrepareVisionWeights(e->vision_weights_));
  } else {
    // The tower and the projector run where the decoder does; pixels arrive and the visual rows
    // leave through the host (vision_tower.h).
    FZ_ASSIGN_OR_RETURN(e->vision_weights_.tower,
                        vision::VisionTowerWeightsOn(e->vision_weights_.tower, options.device));
    FZ_ASSIGN_OR_RETURN(e->vision_weights_.projector,
                        vision::ProjectorWeightsOn(e->vision_weights_.projector, options.device));
  }
  // One pool per page format a policy may ask for, all drawing from kv_max_bytes: the full format
  // plus int4/int2 (KIVI/ZipVL pages; only when head_dim allows 32-channel groups).
  const kv::PageLayout layout = e->decoder_->KvLayout(options.kv_format, options.kv_page_tokens);
  std::vector<kv::KvFormat> formats = {options.kv_format};
  if (kv::CheckQuantPageLayout(e->decoder_->KvLayout(kv::KvFormat::kInt4)).ok()) {
    formats.push_back(kv::KvFormat::kInt4);
    formats.push_back(kv::KvFormat::kInt2);
  }
  e->weight_bytes_ = HeldWeightBytes(e->decoder_->weights(), e->vision_weights_);
  if (options.memory_budget_bytes > 0) {
    FZ_ASSIGN_OR_RETURN(
        e->options_.kv_max_bytes,
        KvBudgetLeftByWeights(options.memory_budget_bytes, e->weight_bytes_, layout.PageBytes(),
                              WeightFormatName(e->options_.weight_format)));
    if (!options.device.is_cpu()) {
      // The pool takes its pages as sessions grow: a budget the device cannot supply now (other
      // processes hold part of it) would fail turns later instead of the load now.
      FZ_ASSIGN_OR_RETURN(const DeviceMemoryInfo memory, QueryDeviceMemoryInfo(options.device));
      if (static_cast<uint64_t>(e->options_.kv_max_bytes) > memory.free_bytes) {
        return ResourceExhaustedError(
            "the memory budget leaves the KV pool {:.0f} MiB beside the weights, but {} has only "
            "{:.0f} MiB free after loading them (of {:.0f} MiB): lower the budget "
            "(--gpu-memory-utilization, --memory-budget-bytes) or free the device",
            static_cast<double>(e->options_.kv_max_bytes) / (1 << 20),
            DeviceName(options.device), static_cast<double>(memory.free_bytes) / (1 << 20),
            static_cast<double>(memory.total_bytes) / (1 << 20));
      }
    }
  }
  FZ_ASSIGN_OR_RETURN(
      e->pools_, kv::KvPools::Create(layout, formats, e->options_.kv_max_bytes, options.device));
  const int64_t max_pages = e->pools_->pool(options.kv_format)->max_pages();
  // What the template writes after an assistant reply (e.g. "<|im_end|>\n"): fed before the next
  // turn's messages so the cache holds exactly the rendered conversation.
  const std::vector<model::ChatMessage> probe = {{"assistant", {model::ChatContent::Text("\x01")}}};
  FZ_ASSIGN_OR_RETURN(const std::string rendered, e->template_->Render(probe, false));
  const size_t at = rendered.find('\x01');
  e->assistant_close_ = at == std::string::npos ? "" : rendered.substr(at + 1);
  FZ_LOG_INFO(
      "engine: loaded {} ({} layers, hidden {}, vocab {}), weights {:.1f} MiB ({}), KV {} {} "
      "pages of {} tokens, {:.1f} MiB (page formats {})",
      dir.string(), e->config_.text.num_hidden_layers, e->config_.text.hidden_size,
      e->config_.text.vocab_size, static_cast<double>(e->weight_bytes_) / (1 << 20),
      WeightFormatName(e->options_.weight_format), max_pages, kv::KvFormatName(layout.format),
      layout.page_tokens, static_cast<double>(e->options_.kv_max_bytes) / (1 << 20),
      fmt::join(e->pools_->formats(), ", "));
#if defined(__GLIBC__)
  // Loading made copies it has let go (weights quantised from bf16, int8 codes once packed):
  // glibc keeps freed heap pages resident unless asked, and a server would carry them for life.
  malloc_trim(0);
#endif
  return e;
}

StatusOr<std::unique_ptr<Conversation>> Engine::NewConversation(
    const compress::PolicyConfig& policy) {
  std::unique_ptr<Conversation> c(new Conversation());
  c->policy_ = compress::FormatPolicyConfig(policy);
  FZ_ASSIGN_OR_RETURN(c->sequence_, decoder_->NewSequence(*pools_, options_.kv_format, policy));
  return c;
}

StatusOr<std::unique_ptr<Conversation>> Engine::NewConversation(std::string_view policy) {
  const std::string given = policy.empty() ? options_.default_policy : std::string(policy);
  FZ_ASSIGN_OR_RETURN(const compress::PolicyConfig config, compress::ParsePolicyConfig(given));
  FZ_ASSIGN_OR_RETURN(std::unique_ptr<Conversation> c, NewConversation(config));
  c->policy_ = given;
  return c;
}

uint64_t Engine::KvGrowthBound(const Conversation& c, int64_t prefill_tokens, int64_t chunk_tokens,
                               int64_t decode_tokens) const {
  const kv::KvPrecision precision = c.sequence_->policy->Precision(options_.kv_format);
  const std::array<kv::KvFormat, 3> used = {precision.full, precision.important, precision.rest};
  const int64_t page = pools_->base_layout().page_tokens;
  const int64_t tokens = std::max<int64_t>(prefill_tokens, 0) + std::max<int64_t>(decode_tokens, 0);
  const auto ceil_div = [](int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; };
  const int window = c.sequence_->policy->ResidualWindow();
  bool quantizes = false;
  for (const kv::KvFormat f : used) quantizes = quantizes || kv::IsQuantized(f);
  // Per format the policy may store in, the pages the turn's tokens could take if every one of
  // them went there (the step reservations take exactly that for every format at once), so the
  // bound is a sum over formats at each format's own page size.
  //   dense:     tokens go to appendable pages, so a layer gains at most ceil(N / P) pages; with
  //              a residual window, one more page, and the window held twice while a
  //              recompression re-stores its kFull tokens before freeing the old pages.
  //   quantised: pages are fresh per append and class, so every prefill chunk and every decode
  //              recompression may leave one partly filled page.
  const int64_t chunks =
      chunk_tokens > 0 ? ceil_div(std::max<int64_t>(prefill_tokens, 0), chunk_tokens) : 1;
  const int64_t recompressions =
      window > 0 ? ceil_div(std::max<int64_t>(decode_tokens, 0), window) : 0;
  uint64_t bytes_per_layer = 0;
  for (size_t i = 0; i < used.size(); ++i) {
    if (std::find(used.begin(), used.begin() + i, used[i]) != used.begin() + i) continue;
    const kv::PagePool* pool = pools_->pool(used[i]);
    if (pool == nullptr) continue;
    int64_t pages = ceil_div(tokens, page);
    if (kv::IsQuantized(used[i])) {
      pages += chunks + recompressions + 1;
    } else if (quantizes || window > 0) {
      pages += 1 + (window > 0 ? ceil_div(window, page) + 1 : 0);
    }
    bytes_per_layer += static_cast<uint64_t>(pages) * pool->layout().PageBytes();
  }
  return bytes_per_layer * static_cast<uint64_t>(config_.text.num_hidden_layers);
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
    if (!ended_on_stop) {
      p.ids = c.pending_;
      p.recorded = c.pending_.size();
    }
    FZ_ASSIGN_OR_RETURN(std::vector<int32_t> close, tokenizer_->Encode(assistant_close_, false));
    p.ids.insert(p.ids.end(), close.begin(), close.end());
  }
  p.prompt_tokens = static_cast<int64_t>(prompt.size());
  p.ids.insert(p.ids.end(), prompt.begin(), prompt.end());
  // The context, checked before anything costly (embedding, the vision tower) runs.
  const int64_t total = c.sequence_->length + static_cast<int64_t>(p.ids.size());
  if (context_tokens() > 0 && total >= context_tokens()) {
    return InvalidArgumentError(
        "the prompt is {} tokens ({} already in the conversation, {} new); the model's context "
        "is {} tokens (max_position_embeddings), which leaves no room for an answer",
        total, c.sequence_->length, p.ids.size(), context_tokens());
  }
  // Embedded where the table lives, then on the host: the visual rows are merged there, and the
  // decoder takes each step's rows to its device itself.
  FZ_ASSIGN_OR_RETURN(p.embeds, decoder_->Embed(p.ids));
  if (!p.embeds.device().is_cpu()) {
    FZ_ASSIGN_OR_RETURN(p.embeds, p.embeds.To(Device::Cpu()));
  }

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
    p.visual.resize(p.ids.size(), 0);
    for (int64_t row : rows_at) p.visual[static_cast<size_t>(row)] = 1;
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

StatusOr<Engine::PendingStart> Engine::BeginTurn(Conversation& c, std::span<const Message> messages,
                                                 const TurnOptions& options) {
  if (c.decoding_) return FailedPreconditionError("the conversation is still decoding a turn");
  if (c.start_ != nullptr) return FailedPreconditionError("the conversation is starting a turn");
  if (c.broken_) {
    return FailedPreconditionError(
        "the conversation's cache holds part of a turn that was cancelled mid-prompt or failed "
        "mid-step; start a new conversation");
  }
  FZ_RETURN_IF_ERROR(llm::ValidateSamplingParams(options.sampling));
  PendingStart pending;
  pending.start_ms = NowMs();
  llm::SamplingParams& sp = pending.sampling;
  sp = options.sampling;
  for (int64_t id : config_.generation.eos_token_ids) {
    if (options.ignore_eos) break;
    if (std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), id) ==
        sp.stop_token_ids.end()) {
      sp.stop_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  pending.cached = c.sequence_->length;
  FZ_ASSIGN_OR_RETURN(pending.prepared, Prepare(c, messages));
  // Generation stops when the context is full: the prompt's positions plus the answer's.
  if (context_tokens() > 0) {
    const int64_t room =
        context_tokens() - pending.cached - static_cast<int64_t>(pending.prepared.ids.size());
    sp.max_new_tokens = static_cast<int>(std::min<int64_t>(sp.max_new_tokens, room));
  }
  return pending;
}

StatusOr<StepOutput> Engine::FinishStart(Conversation& c, PendingStart& pending, Tensor& logits,
                                         double prefill_ms) {
  const PreparedTurn& p = pending.prepared;
  c.history_.insert(c.history_.end(), p.ids.begin() + static_cast<ptrdiff_t>(p.recorded),
                    p.ids.end());
  c.pending_.clear();
  c.first_turn_ = false;

  c.current_ = TurnResult();
  TurnStats& st = c.current_.stats;
  st.policy = c.policy_;
  st.prompt_tokens = p.prompt_tokens;
  st.prefilled_tokens = static_cast<int64_t>(p.ids.size());
  st.cached_tokens = pending.cached;
  st.visual_tokens = p.visual_tokens;
  st.vision_ms = p.vision_ms;
  st.prefill_ms = prefill_ms;
  FillKvStats(*c.sequence_, config_.text, st);
  c.sampler_ = std::make_unique<llm::Sampler>(pending.sampling);
  c.stop_ = std::make_unique<llm::StopCondition>(pending.sampling);
  c.detok_ = std::make_unique<model::StreamingDecoder>(*tokenizer_, /*skip_special_tokens=*/true);
  c.raw_text_.clear();
  c.emitted_bytes_ = 0;
  c.turn_start_ms_ = pending.start_ms;
  c.decoding_ = true;

  FZ_ASSIGN_OR_RETURN(const int32_t token, SampleNext(c, logits));
  st.ttft_ms = NowMs() - pending.start_ms;
  return Accept(c, token);
}

StatusOr<StepOutput> Engine::StartTurn(Conversation& c, std::span<const Message> messages,
                                       const TurnOptions& options) {
  Conversation* one[] = {&c};
  const std::span<const Message> one_messages[] = {messages};
  std::vector<StatusOr<StepOutput>> out =
      StartTurns(one, one_messages, std::span<const TurnOptions>(&options, 1));
  return std::move(out[0]);
}

std::vector<StatusOr<StepOutput>> Engine::StartTurns(
    std::span<Conversation* const> conversations,
    std::span<const std::span<const Message>> messages, std::span<const TurnOptions> options) {
  const size_t n = conversations.size();
  std::vector<StatusOr<StepOutput>> out(n, InternalError("turn not started"));
  if (messages.size() != n || options.size() != n) {
    for (auto& o : out) {
      o = InvalidArgumentError("StartTurns: {} conversations, {} message lists, {} options", n,
                               messages.size(), options.size());
    }
    return out;
  }
  // Render, tokenize and encode visuals per turn; a bad request fails only its own turn.
  std::vector<PendingStart> pending;
  std::vector<size_t> index;  // pending[j] is conversations[index[j]]
  for (size_t i = 0; i < n; ++i) {
    Conversation& c = *conversations[i];
    if (std::find(conversations.begin(), conversations.begin() + i, &c) !=
        conversations.begin() + i) {
      out[i] = InvalidArgumentError("StartTurns: conversation {} is given twice", i);
      continue;
    }
    StatusOr<PendingStart> p = BeginTurn(c, messages[i], options[i]);
    if (!p.ok()) {
      out[i] = p.status();
      continue;
    }
    pending.push_back(*std::move(p));
    index.push_back(i);
  }
  if (pending.empty()) return out;

  std::vector<llm::Sequence*> seqs;
  std::vector<Tensor> embeds;
  std::vector<llm::PrefillOptions> prefill;
  for (size_t j = 0; j < pending.size(); ++j) {
    llm::Sequence* seq = conversations[index[j]]->sequence_.get();
    seq->prefill_stats.Reset(static_cast<int>(config_.text.num_hidden_layers));
    seqs.push_back(seq);
    embeds.push_back(pending[j].prepared.embeds);
    prefill.push_back(llm::PrefillOptions{.chunk_tokens = options_.prefill_chunk_tokens,
                                          .visual = pending[j].prepared.visual});
  }
  const double t_prefill = NowMs();
  StatusOr<std::vector<Tensor>> logits = decoder_->PrefillBatch(seqs, embeds, prefill);
  const double prefill_ms = NowMs() - t_prefill;
  for (size_t j = 0; j < pending.size(); ++j) {
    const size_t i = index[j];
    if (!logits.ok()) {
      MarkBroken(*conversations[i]);  // its prompt may be partly in the cache
      out[i] = logits.status();
      continue;
    }
    out[i] = FinishStart(*conversations[i], pending[j], (*logits)[j], prefill_ms);
  }
  return out;
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
  out.stop_reason = reason;
  size_t visible;
  if (out.finished) {
    if (reason != llm::StopReason::kStopString) c.raw_text_ += c.detok_->Finish();
    visible = reason == llm::StopReason::kStopString ? text_end : c.raw_text_.size();
  } else {
    visible = c.raw_text_.size() - c.stop_->HeldBackBytes(c.raw_text_);
  }
  if (visible > c.emitted_bytes_) {
    out.delta = c.raw_text_.substr(c.emitted_bytes_, visible - c.emitted_bytes_);
    c.emitted_bytes_ = visible;
  }
  out.withheld_bytes = c.raw_text_.size() - std::min(visible, c.raw_text_.size());
  r.text = c.raw_text_.substr(0, std::min(visible, c.raw_text_.size()));
  r.stats.generated_tokens = generated;
  if (out.finished) {
    r.stats.stop_reason = reason;
    FillKvStats(*c.sequence_, config_.text, r.stats);
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
  // Every conversation's pages before anything is written: when the pools cannot supply them the
  // step fails whole, each cache as it was (the conversations go on decoding; retry or Cancel).
  std::vector<llm::StepDemand> demands;
  for (llm::Sequence* seq : seqs) demands.push_back(llm::StepDemand{seq, 1, false});
  llm::StepReservation reservation;
  FZ_RETURN_IF_ERROR(decoder_->kv_backend().Reserve(demands, reservation));
  const double t0 = NowMs();
  StatusOr<Tensor> step = decoder_->DecodeStep(seqs, tokens);
  if (!step.ok()) {
    for (Conversation* c : conversations) MarkBroken(*c);
    return step.status();
  }
  Tensor& logits = *step;
  const double step_ms = NowMs() - t0;
  std::vector<StepOutput> outs;
  for (size_t b = 0; b < conversations.size(); ++b) {
    Conversation& c = *conversations[b];
    c.pending_.clear();  // the token just went into the cache
    c.current_.stats.decode_ms += step_ms;
    const int64_t row = static_cast<int64_t>(b);
    FZ_ASSIGN_OR_RETURN(Tensor row_logits, logits.Slice(row, row + 1));
    FZ_ASSIGN_OR_RETURN(const int32_t token, SampleNext(c, row_logits));
    outs.push_back(Accept(c, token));
  }
  return outs;
}

Status Engine::PrepareTurn(Conversation& c, std::span<const Message> messages,
                           const TurnOptions& options) {
  FZ_ASSIGN_OR_RETURN(PendingStart pending, BeginTurn(c, messages, options));
  if (pending.prepared.ids.empty()) return InvalidArgumentError("the turn renders to no tokens");
  c.start_ = std::make_unique<PendingStart>(std::move(pending));
  return absl::OkStatus();
}

StatusOr<std::vector<StepOutput>> Engine::MixedStep(std::span<const StepWork> work) {
  std::vector<llm::StepInput> inputs;
  inputs.reserve(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    Conversation* c = work[i].conversation;
    if (c == nullptr) return InvalidArgumentError("MixedStep: work item {} has no conversation", i);
    for (size_t j = 0; j < i; ++j) {
      if (work[j].conversation == c) {
        return InvalidArgumentError("MixedStep: conversation {} is given twice", i);
      }
    }
    llm::StepInput in;
    in.seq = c->sequence_.get();
    if (work[i].prefill_tokens > 0) {
      if (c->start_ == nullptr) {
        return FailedPreconditionError("MixedStep: conversation {} has no turn starting", i);
      }
      const PendingStart& s = *c->start_;
      const int64_t total = static_cast<int64_t>(s.prepared.ids.size());
      const int64_t rows = std::min(work[i].prefill_tokens, total - s.fed);
      FZ_ASSIGN_OR_RETURN(in.embeds, s.prepared.embeds.Slice(s.fed, s.fed + rows));
      if (!s.prepared.visual.empty()) {
        in.visual = std::span<const uint8_t>(s.prepared.visual)
                        .subspan(static_cast<size_t>(s.fed), static_cast<size_t>(rows));
      }
      in.logits = s.fed + rows == total;
    } else {
      if (!c->decoding_) {
        return FailedPreconditionError("MixedStep: conversation {} is not decoding", i);
      }
      in.token = c->next_token_;
    }
    inputs.push_back(in);
  }
  // Each item's pages before anything is written (in order): an item the pools cannot serve sits
  // the step out untouched, RESOURCE_EXHAUSTED in its output; the others run.
  llm::StepReservation reservation;
  std::vector<StepOutput> outs(work.size());
  std::vector<llm::StepInput> running;
  std::vector<size_t> running_item;
  for (size_t i = 0; i < work.size(); ++i) {
    // A prefill chunk's rows go to the formats their classes pick; a decode token is kFull.
    const bool prefill = inputs[i].embeds.defined();
    const llm::StepDemand demand{inputs[i].seq, prefill ? inputs[i].embeds.dim(0) : 1, prefill};
    outs[i].status = decoder_->kv_backend().Reserve({&demand, 1}, reservation);
    if (!outs[i].status.ok()) {
      outs[i].sampled = false;
      continue;
    }
    running.push_back(inputs[i]);
    running_item.push_back(i);
  }
  if (running.empty()) return outs;
  // Per-turn prefill statistics start with the turn's first chunk.
  for (const size_t i : running_item) {
    Conversation& c = *work[i].conversation;
    if (inputs[i].embeds.defined() && c.start_->fed == 0) {
      c.sequence_->prefill_stats.Reset(static_cast<int>(config_.text.num_hidden_layers));
    }
  }
  // Every decode row's next token is sampled by the step itself, in one call after lm_head: on a
  // GPU a planned step's sampling parameters go up with its plan, and the ids' read-back is the
  // step's only host wait. The draws are taken now (the sampler's state moves as it would after
  // the step; a step that fails breaks its conversations anyway).
  std::vector<ops::RowSampling> sampling;  // one per decode input, in input order
  for (size_t j = 0; j < running.size(); ++j) {
    if (running[j].embeds.defined()) continue;
    Conversation& c = *work[running_item[j]].conversation;
    sampling.push_back(c.sampler_->NextRow(c.history_));
  }
  std::vector<int32_t> sampled(sampling.size());
  const double t0 = NowMs();
  StatusOr<Tensor> logits = decoder_->MixedStep(running, sampling, sampled);
  const double step_ms = NowMs() - t0;
  if (!logits.ok()) {
    for (const size_t i : running_item) MarkBroken(*work[i].conversation);
    return logits.status();
  }
  size_t next_sampled = 0;
  for (size_t j = 0; j < running_item.size(); ++j) {
    const size_t i = running_item[j];
    Conversation& c = *work[i].conversation;
    FZ_ASSIGN_OR_RETURN(Tensor row,
                        logits->Slice(static_cast<int64_t>(j), static_cast<int64_t>(j) + 1));
    if (inputs[i].embeds.defined()) {
      PendingStart& s = *c.start_;
      s.fed += inputs[i].embeds.dim(0);
      s.prefill_ms += step_ms;
      if (!inputs[i].logits) {
        outs[i].sampled = false;
        continue;
      }
      const std::unique_ptr<PendingStart> start = std::move(c.start_);
      FZ_ASSIGN_OR_RETURN(outs[i], FinishStart(c, *start, row, start->prefill_ms));
      continue;
    }
    c.pending_.clear();  // the token just went into the cache
    c.current_.stats.decode_ms += step_ms;
    outs[i] = Accept(c, sampled[next_sampled++]);
  }
  return outs;
}

StatusOr<int32_t> Engine::SampleNext(Conversation& c, Tensor& logits) {
  // The sampler's row (its draw taken as Sampler::Sample takes it), carried out where the logits
  // are: on a GPU only the id comes back.
  const ops::RowSampling row = c.sampler_->NextRow(c.history_);
  int32_t token = 0;
  FZ_RETURN_IF_ERROR(ops::SampleTokens(logits, std::span(&row, 1), std::span(&token, 1)));
  return token;
}

void Engine::MarkBroken(Conversation& c) {
  // A failed step may have appended its token (or chunk) to some layers and not to others
  // (SequenceKv::Append keeps what it stored before a pool ran out): such a cache must never be
  // continued, exported or reused, whether the turn was starting or decoding.
  c.broken_ = true;
  c.start_.reset();
  if (c.decoding_) {
    c.decoding_ = false;
    c.current_.stats.stop_reason = llm::StopReason::kCancelled;
  }
}

void Engine::Cancel(Conversation& c) {
  if (c.start_ != nullptr) {
    if (c.start_->fed > 0) c.broken_ = true;
    c.start_.reset();
    return;
  }
  if (!c.decoding_) return;
  c.decoding_ = false;
  c.current_.stats.stop_reason = llm::StopReason::kCancelled;
  FillKvStats(*c.sequence_, config_.text, c.current_.stats);
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
    StatusOr<std::vector<StepOutput>> outs = Step(batch);
    if (!outs.ok()) {
      Cancel(c);  // a step refused for want of pages left the cache whole; a broken one stays so
      return outs.status();
    }
    if (on_text && !(*outs)[0].delta.empty()) on_text((*outs)[0].delta);
  }
  return c.current_;
}

}  // namespace framezip::engine::runtime

namespace framezip::engine::runtime {

StatusOr<Tensor> Engine::ScoreTurn(Conversation& c, std::span<const Message> messages,
                                   std::span<const int32_t> forced) {
  if (c.decoding_) return FailedPreconditionError("the conversation is still decoding a turn");
  if (c.broken_) {
    return FailedPreconditionError(
        "the conversation's cache holds part of a failed turn; score "
        "on a new conversation");
  }
  if (forced.empty()) return InvalidArgumentError("ScoreTurn needs at least one forced token");
  for (int32_t t : forced) {
    if (t < 0 || t >= config_.text.vocab_size) {
      return OutOfRangeError("forced token {} is outside the vocabulary of {}", t,
                             config_.text.vocab_size);
    }
  }
  const double start = NowMs();
  const int64_t cached = c.sequence_->length;
  FZ_ASSIGN_OR_RETURN(PreparedTurn p, Prepare(c, messages));
  const double t_prefill = NowMs();
  llm::PrefillOptions prefill;  // as StartTurn prefills, so the policy sees the same inputs
  prefill.chunk_tokens = options_.prefill_chunk_tokens;
  prefill.visual = p.visual;
  c.sequence_->prefill_stats.Reset(static_cast<int>(config_.text.num_hidden_layers));
  StatusOr<Tensor> last = OnHost(decoder_->Prefill(*c.sequence_, p.embeds, prefill));
  if (!last.ok()) {
    MarkBroken(c);  // its prompt may be partly in the cache
    return last.status();
  }
  const double prefill_ms = NowMs() - t_prefill;
  c.history_.insert(c.history_.end(), p.ids.begin() + static_cast<ptrdiff_t>(p.recorded),
                    p.ids.end());
  c.pending_.clear();
  c.first_turn_ = false;

  const int64_t n = static_cast<int64_t>(forced.size());
  const int64_t v = last->dim(1);
  FZ_ASSIGN_OR_RETURN(Tensor logits, Tensor::Empty({n, v}, DType::kF32));
  std::memcpy(logits.data<float>(), last->data<float>(), static_cast<size_t>(v) * sizeof(float));
  const double ttft_ms = NowMs() - start;
  llm::Sequence* seq[] = {c.sequence_.get()};
  double decode_ms = 0;
  // Every forced token but the last goes into the cache; the last stays pending, as a sampled
  // token would, so the next turn's close feeds it exactly like after generation.
  for (int64_t i = 0; i + 1 < n; ++i) {
    c.history_.push_back(forced[i]);
    const double t0 = NowMs();
    StatusOr<Tensor> step = OnHost(decoder_->DecodeStep(seq, forced.subspan(i, 1)));
    if (!step.ok()) {
      MarkBroken(c);
      return step.status();
    }
    decode_ms += NowMs() - t0;
    std::memcpy(logits.data<float>() + (i + 1) * v, step->data<float>(),
                static_cast<size_t>(v) * sizeof(float));
  }
  c.history_.push_back(forced.back());
  c.pending_ = {forced.back()};

  c.current_ = TurnResult();
  TurnResult& r = c.current_;
  r.token_ids.assign(forced.begin(), forced.end());
  const auto& eos = config_.generation.eos_token_ids;
  const bool ends_on_eos = std::find(eos.begin(), eos.end(), forced.back()) != eos.end();
  r.text = tokenizer_->Decode(ends_on_eos ? forced.first(forced.size() - 1) : forced,
                              /*skip_special_tokens=*/true);
  TurnStats& st = r.stats;
  st.policy = c.policy_;
  st.prompt_tokens = p.prompt_tokens;
  st.prefilled_tokens = static_cast<int64_t>(p.ids.size());
  st.cached_tokens = cached;
  st.visual_tokens = p.visual_tokens;
  st.generated_tokens = n;
  st.vision_ms = p.vision_ms;
  st.prefill_ms = prefill_ms;
  st.ttft_ms = ttft_ms;
  st.decode_ms = decode_ms;
  st.decode_tokens_per_s = decode_ms > 0 ? (n - 1) * 1000.0 / decode_ms : 0;
  FillKvStats(*c.sequence_, config_.text, st);
  st.stop_reason = ends_on_eos ? llm::StopReason::kStopToken : llm::StopReason::kMaxTokens;
  return logits;
}

}  // namespace framezip::engine::runtime
