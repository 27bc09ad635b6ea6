// Engine: the runtime facade the server and the CLI use. It owns a loaded model (config, weights,
// tokenizer, chat template, vision tower, decoder) and a KV page pool, and runs chat turns:
//
//   messages (text + preprocessed frames) → chat template → placeholder expansion → tokens
//   → vision tower/projector/pooling → visual rows merged into the token embeddings
//   → prefill (chunked, only what is new) → decode with streaming text deltas.
//
// Two levels of API:
//   1. RunTurn(): one whole turn of one Conversation, blocking, with streaming callbacks and a
//      cancellation flag checked before every step. This is what `framezip run` uses, and what a
//      server can call from a worker thread per session.
//   2. StartTurn() + Step(): the building blocks of continuous batching. StartTurn() tokenizes,
//      encodes the visuals and prefills a conversation (returning it in the "decoding" state with
//      its first token sampled); Step() advances ANY number of decoding conversations by one token
//      in one batched decoder call (one GEMV pass over the weights for the whole batch) and
//      reports each one's text delta and whether it finished. RunTurn() is StartTurn + Step loop.
//      StartTurns() starts several turns with one batched prefill (Decoder::PrefillBatch).
//   3. PrepareTurn() + MixedStep(): continuous batching with chunked prefill (the server's path).
//      PrepareTurn() renders, tokenizes and encodes the visuals of a turn (no decoder work);
//      each MixedStep() then runs, in ONE decoder pass over the weights (Decoder::MixedStep),
//      the next prompt chunk of any number of starting turns together with one decode token of
//      any number of decoding conversations. A turn's first token is sampled with its last chunk,
//      so a long prompt delays the others by one chunk per step, never by the whole prompt.
//
// Conversations keep their KV cache between turns: turn N+1 prefills only the tokens of its new
// messages (plus the template's closing of the previous assistant reply), never the history.
// A Conversation is owned by the caller; it must not outlive its Engine.
//
// Thread-safety: Engine's methods are thread-compatible per Conversation — a Conversation must
// be used by one thread at a time, and calls that compute (StartTurn, Step, RunTurn) should be
// issued from ONE scheduler thread: the CPU ops share one thread pool whose loops are serialised,
// so concurrent calls are correct but gain nothing. PrepareTurn() is the exception the server
// makes: it runs on the prepare pool, so a turn's vision tower interleaves with the steps of
// the running turns (loop by loop) instead of stalling one of them whole. Load() and the const
// accessors are thread-safe.
//
// Errors: INVALID_ARGUMENT for bad requests (unknown policy, frames of the wrong shape, more
// visual inputs than placeholders, sampling parameters out of range), RESOURCE_EXHAUSTED when the
// KV pool is full, CANCELLED when the cancel flag was raised, NOT_FOUND / INVALID_ARGUMENT /
// UNIMPLEMENTED from loading a model directory (naming the file or tensor).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/compress/policy_config.h"
#include "engine/core/tensor.h"
#include "engine/kv/kv_pools.h"
#include "engine/kv/page_codec.h"
#include "engine/kv/page_pool.h"
#include "engine/llm/decoder.h"
#include "engine/llm/sampler.h"
#include "engine/model/chat_template.h"
#include "engine/model/config.h"
#include "engine/model/tokenizer.h"
#include "engine/model/weights.h"
#include "engine/runtime/weight_format.h"
#include "engine/vision/vision_weights.h"

namespace framezip::engine::runtime {

struct EngineOptions {
  int threads = 0;  // compute threads; 0 keeps the current ComputePool size
  // Where the decoder, its KV pages and the vision tower and projector run. Pixels and prompts
  // pass through the host; tokens are sampled on the device (only their ids come back).
  Device device = Device::Cpu();
  kv::KvFormat kv_format = kv::KvFormat::kF16;
  int kv_page_tokens = 32;
  int64_t kv_max_bytes = int64_t{4} << 30;  // the KV pool never grows past this
  // When > 0: the weights as loaded (runtime/weight_bytes.h) and the KV pool together stay
  // within this many bytes, as vLLM's --gpu-memory-utilization budget does: the pool gets what
  // the weights leave, in place of kv_max_bytes, so weights held in 8 bits leave room for more
  // sessions' KV. Load fails with RESOURCE_EXHAUSTED, naming both sizes, when the weights leave
  // less than one page. Activations and workspaces are outside it.
  int64_t memory_budget_bytes = 0;
  int64_t prefill_chunk_tokens = 1024;      // 0 = whole prompt in one chunk
  std::string default_policy = "none";      // compression policy for new conversations
  // How the decoder's projections are held (runtime/weight_format.h): bf16 keeps the
  // checkpoint's weights as stored; int8 quantises them at load (CPU only).
  WeightFormat weight_format = WeightFormat::kBf16;
  // How the vision tower's projections are held: bf16 as stored, or int8 quantised at load (CPU
  // only; runtime/weight_format.h).
  WeightFormat vision_weight_format = WeightFormat::kBf16;
};

// One visual input of a message, already decoded and preprocessed (media/) to the vision
// tower's spec: f32, normalised, [N, 3, S, S] with S = vision image_size.
struct VisualInput {
  enum class Kind { kImage, kVideo };
  Kind kind = Kind::kVideo;
  Tensor pixels;
  // kVideo: pixels are the F sampled frames.
  // kImage: original_height/width > 0 → anyres: pixels are 1 + tiles (base tile first, row-major);
  //         0 → base resolution: pixels [1, 3, S, S] (730 tokens for OV).
  int64_t original_height = 0;
  int64_t original_width = 0;
};

// A chat message. Its visuals are placed before its text, as the OV template does.
struct Message {
  std::string role = "user";  // "system", "user", "assistant"
  std::string text;
  std::vector<VisualInput> visuals;
};

struct TurnOptions {
  // Generation settings. Leave stop_token_ids empty to use the model's eos ids
  // (generation_config.json); they are added to any ids given.
  llm::SamplingParams sampling;
  // Benchmarks: do not add the model's eos ids to the stop tokens (generate max_new_tokens).
  bool ignore_eos = false;
};

// Per-turn figures (also the server's per-turn stats).
struct TurnStats {
  std::string policy;
  int64_t prompt_tokens = 0;     // tokens of this turn's new input (text + visual placeholders)
  int64_t prefilled_tokens = 0;  // tokens run through prefill this turn (= prompt_tokens + close)
  int64_t cached_tokens = 0;     // tokens already in the KV cache before this turn
  int64_t visual_tokens = 0;     // placeholder rows filled with visual features
  int64_t generated_tokens = 0;
  double vision_ms = 0;  // vision tower + projector + pooling
  double prefill_ms = 0;
  double ttft_ms = 0;    // turn start → first token sampled
  double decode_ms = 0;  // all decode steps of this turn
  double decode_tokens_per_s = 0;
  size_t kv_bytes = 0;  // KV pages held by the conversation at the end of the turn
  // kv_bytes split by page format (index: kv::KvFormat).
  kv::KvBytesByFormat kv_bytes_by_format = {};
  // Bytes an uncompressed f16 cache of the conversation's tokens (every layer, K and V) would take,
  // over kv_bytes (1 = uncompressed f16; evicted tokens count as saved).
  double compression_ratio = 1;
  // Per decoder layer, this turn's prefilled tokens kept at full or important precision (ZipVL's
  // important ratio; FastV's kept fraction; 1 for none).
  std::vector<float> layer_kept_ratio;
  double selection_overhead_ms = 0;  // policy time choosing tokens during prefill
  // Per decoder layer, this turn's visual rows that ran through it (Dynamic-LLaVA removes all but
  // its kept ones from sparse_layer on).
  std::vector<int64_t> layer_visual_tokens;
  // Prefill work the policy removed: the linear layers' FLOPs (q/k/v/o projections and MLP) of
  // the rows it took out of later layers, absolute and as a fraction of the turn's prefill.
  double prefill_flops_saved = 0;
  double prefill_flops_saved_ratio = 0;
  // Generated tokens whose K/V the policy did not store (Dynamic-LLaVA's output-text gating).
  int64_t text_tokens_gated = 0;
  // AttentionPack: tokens held in low-rank blocks (over all layers), the key rank and the mean
  // rank values are read at, and the time factorising (prefill) and reading the blocks (decode).
  int64_t low_rank_tokens = 0;
  double low_rank_key_rank = 0;
  double low_rank_value_rank_mean = 0;
  double low_rank_build_ms = 0;
  double low_rank_attend_ms = 0;
  llm::StopReason stop_reason = llm::StopReason::kNone;
};

struct TurnResult {
  std::string text;                // the full reply (stop string excluded)
  std::vector<int32_t> token_ids;  // generated ids (the stop token included when it ended the turn)
  TurnStats stats;
};

// One conversation: its KV cache, position and token history. Create with
// Engine::NewConversation. Movable only through the unique_ptr.
namespace internal {
struct PreparedTurn;  // a turn rendered, tokenized and embedded (engine.cc)
struct TurnStart;     // a turn between its preparation and its first token (engine.cc)
}  // namespace internal

class Conversation {
 public:
  Conversation(const Conversation&) = delete;
  Conversation& operator=(const Conversation&) = delete;
  ~Conversation();

  // Tokens in the KV cache (prompt and replies of finished turns, minus the pending tail).
  int64_t cached_tokens() const { return sequence_->length; }
  size_t kv_bytes() const { return sequence_->kv.bytes(); }
  bool decoding() const { return decoding_; }
  // Every token id fed to the model or sampled by it, each once, in order (what the repetition
  // penalty looks at): the cached tokens followed by the pending one.
  const std::vector<int32_t>& history() const { return history_; }
  // A turn prepared by Engine::PrepareTurn whose prompt MixedStep has not fully prefilled yet.
  bool starting() const { return start_ != nullptr; }
  // Tokens of the starting turn's prompt not prefilled yet (0 when not starting).
  int64_t prefill_remaining() const;
  // The policy as given to NewConversation, or compress::FormatPolicyConfig of it.
  const std::string& policy() const { return policy_; }
  // The turn in progress (or the last one): text so far and stats.
  const TurnResult& current() const { return current_; }

 private:
  friend class Engine;
  Conversation() = default;

  std::unique_ptr<llm::Sequence> sequence_;
  std::string policy_;
  std::vector<int32_t> history_;  // every token id fed to or sampled by the model
  std::vector<int32_t> pending_;  // sampled but not yet fed (the last token of a turn)
  bool first_turn_ = true;
  bool decoding_ = false;
  std::unique_ptr<internal::TurnStart> start_;  // set while starting()
  // A turn was cancelled part-way through its prompt, or a step that fed this conversation failed:
  // the KV cache holds tokens (or parts of a token's layers) the history does not, so no further
  // turn, step or export runs on this conversation.
  bool broken_ = false;
  // State of the turn in progress.
  TurnResult current_;
  std::unique_ptr<llm::Sampler> sampler_;
  std::unique_ptr<llm::StopCondition> stop_;
  std::unique_ptr<model::StreamingDecoder> detok_;
  std::string raw_text_;      // decoded text including a possible stop string
  size_t emitted_bytes_ = 0;  // bytes of raw_text_ already returned as deltas
  int32_t next_token_ = -1;   // sampled, to be fed by the next Step
  double turn_start_ms_ = 0;
};

// One commit of a conversation's KV (Engine::ExportConversation): the codec segment and the token
// ids it covers (the block key of the segment is derived from them by the caller).
struct ConversationSegment {
  kv::EncodedSegment encoded;
  std::vector<int32_t> tokens;  // fed since the previous commit (the segment's turn)
};

// A conversation rebuilt from its committed segments, and where its next commit starts.
struct RestoredConversation {
  std::unique_ptr<Conversation> conversation;
  kv::SegmentMark mark;
};

// What Step() reports for one conversation.
// The engine's stop rule (eos and stop token ids, stop strings, max_new_tokens and the context)
// is the only one: a server applies `stop_reason` and `delta` as they are.
struct StepOutput {
  std::string delta;  // new text (may be empty: a partial UTF-8 character or a held-back prefix)
  bool finished = false;
  // Why the turn ended at this token (kNone while it goes on): kStopToken (an eos or stop token
  // id, whose text is never shown), kStopString (the text is cut before it) or kMaxTokens.
  llm::StopReason stop_reason = llm::StopReason::kNone;
  // Bytes of the generated text that `delta` leaves out: while the turn goes on, a suffix that may
  // still become a stop string (shown later if it does not); at kStopString, the stop string and
  // whatever followed it in the same token (never shown).
  size_t withheld_bytes = 0;
  // A token was sampled. False for a MixedStep prefill chunk that was not its prompt's last, and
  // for an item that did not run.
  bool sampled = true;
  // MixedStep: RESOURCE_EXHAUSTED when the KV pools could not supply this item's pages; it sat the
  // step out with its conversation untouched (the other items ran). OK otherwise.
  Status status;
};

// One conversation's share of Engine::MixedStep.
struct StepWork {
  Conversation* conversation = nullptr;
  // > 0: prefill up to this many more prompt tokens of a starting() turn (the rest of its prompt
  // when fewer remain). 0: one decode token of a decoding() conversation.
  int64_t prefill_tokens = 0;
};

class Engine {
 public:
  // Loads a Hugging Face LLaVA-OneVision directory: config.json (+ generation_config.json,
  // preprocessor_config.json), *.safetensors, tokenizer.json, and the chat template.
  static StatusOr<std::unique_ptr<Engine>> Load(const std::filesystem::path& model_dir,
                                                const EngineOptions& options = {});

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const model::LlavaConfig& config() const { return config_; }
  const model::PreprocessorConfig& preprocessor() const { return preprocessor_; }
  const model::Tokenizer& tokenizer() const { return *tokenizer_; }
  const llm::Decoder& decoder() const { return *decoder_; }
  const vision::LlavaVisionWeights& vision_weights() const { return vision_weights_; }
  // The options the engine was loaded with (weight_format: GetModelInfo, bench output), as in
  // effect: weight_format after EffectiveWeightFormat, kv_max_bytes the pool's budget (what a
  // memory budget left it).
  const EngineOptions& options() const { return options_; }
  // Bytes of the weights as loaded, where they are served (runtime/weight_bytes.h).
  size_t weight_bytes() const { return weight_bytes_; }
  // The KV page pools (one per format, one shared byte budget).
  const kv::KvPools& kv_pool() const { return *pools_; }
  // Side S of the frames VisualInput expects ([N, 3, S, S]).
  int64_t image_size() const { return config_.vision.image_size; }

  // A new, empty conversation using `policy`.
  StatusOr<std::unique_ptr<Conversation>> NewConversation(const compress::PolicyConfig& policy);
  // The same with the policy in the CLI's form ("zipvl:tau=0.9", compress::ParsePolicyConfig;
  // "" = the engine default), which the conversation's stats then report as given.
  StatusOr<std::unique_ptr<Conversation>> NewConversation(std::string_view policy = "");

  // The model's context: positions a conversation may use (max_position_embeddings). A turn
  // whose prompt leaves no position for an answer is refused with INVALID_ARGUMENT before its
  // visuals are encoded, and generation stops (max_tokens reason) when the context is full.
  int64_t context_tokens() const { return config_.text.max_position_embeddings; }

  // An upper bound of the bytes of KV pages `conversation` gains while it prefills
  // `prefill_tokens` in chunks of at most `chunk_tokens` (0 = one chunk) and then generates
  // `decode_tokens`, whatever its policy decides: for admission control, so an admitted turn
  // never runs out of pages. Every token is counted once in each format the policy stores in,
  // at that format's page size (a step reserves pages in all of them), plus the partly filled
  // pages each chunk and each decode recompression may leave per quantised format (quantised
  // pages are written once), plus a recompression's transient copy of the window.
  uint64_t KvGrowthBound(const Conversation& conversation, int64_t prefill_tokens,
                         int64_t chunk_tokens, int64_t decode_tokens) const;

  // One whole turn: StartTurn, then Step until finished. `on_text` (optional) receives each text
  // delta as it is produced; `cancel` (optional) is checked before every step — when set, the
  // turn stops with CANCELLED and the conversation keeps what was generated so far.
  StatusOr<TurnResult> RunTurn(Conversation& conversation, std::span<const Message> messages,
                               const TurnOptions& options,
                               const std::function<void(std::string_view)>& on_text = nullptr,
                               const std::atomic<bool>* cancel = nullptr);

  // Renders, tokenizes, encodes visuals and prefills this turn's `messages`, then samples the
  // first token. The conversation is then decoding() until a Step reports it finished. The
  // returned output holds the first token's text delta (it may already be finished: a stop token
  // first, or max_new_tokens 1).
  StatusOr<StepOutput> StartTurn(Conversation& conversation, std::span<const Message> messages,
                                 const TurnOptions& options);

  // StartTurn for several distinct conversations at once (continuous batching): each turn is
  // rendered and its visuals encoded on its own (an error there fails only that turn), then all
  // are prefilled together by ONE Decoder::PrefillBatch, which reads the weights once per chunk
  // round instead of once per turn. messages[i] and options[i] belong to conversations[i];
  // results are in input order. A prefill error (KV pool full) fails every turn that reached it.
  std::vector<StatusOr<StepOutput>> StartTurns(std::span<Conversation* const> conversations,
                                               std::span<const std::span<const Message>> messages,
                                               std::span<const TurnOptions> options);

  // Feeds each conversation's last sampled token through the decoder in ONE batch and samples
  // the next token of each. All must be decoding() and distinct. Outputs are in input order.
  // The step's pages are reserved first, all or nothing: when the KV pools cannot supply them it
  // fails with RESOURCE_EXHAUSTED and every cache as it was (the conversations still decode). On
  // an error during the step every conversation of it is left broken: no longer decoding,
  // refusing further turns, steps and exports (FAILED_PRECONDITION).
  StatusOr<std::vector<StepOutput>> Step(std::span<Conversation* const> conversations);

  // Chunked turn start, step 1: BeginTurn's checks plus rendering, tokenizing and encoding the
  // visuals (the vision tower runs here, once per turn, not inside the steps). The conversation is
  // then starting() with prefill_remaining() prompt tokens for MixedStep. It runs no decoder
  // layer and touches neither the KV pools nor any other conversation, so it may run on another
  // thread while MixedStep advances other conversations (the CPU ops serialise their loops).
  // Errors as StartTurn's; the conversation is unchanged on an error.
  Status PrepareTurn(Conversation& conversation, std::span<const Message> messages,
                     const TurnOptions& options);

  // One step of continuous batching: each work item either prefills the next chunk of a
  // starting() turn or feeds a decoding() conversation's last sampled token, all through ONE
  // Decoder::MixedStep. A chunk that ends its prompt samples the turn's first token (TTFT and
  // stats as StartTurn's; prefill_ms sums the steps that ran its chunks); a decode item samples
  // the next token as Step does. Outputs are in input order (sampled = false for a chunk that is
  // not its prompt's last). Conversations must be distinct (INVALID_ARGUMENT) and in the state
  // their item needs (FAILED_PRECONDITION); nothing runs then. Each item's pages are reserved
  // before the step, in order; an item the pools cannot serve does not run and has
  // RESOURCE_EXHAUSTED in its output's status. On a decoder error every conversation that ran is
  // left broken, as by Step.
  StatusOr<std::vector<StepOutput>> MixedStep(std::span<const StepWork> work);

  // Ends a decoding conversation's turn early (client cancel): stop_reason kCancelled. A starting
  // turn is abandoned; when some of its prompt was already prefilled the conversation cannot run
  // another turn (FAILED_PRECONDITION): drop it.
  void Cancel(Conversation& conversation);

  // Teacher forcing (framezip eval --agreement): renders, encodes and prefills `messages` like
  // StartTurn, then feeds `forced` through the decoder one decode step at a time — the path
  // generation takes, so the policy's decode hooks apply — instead of sampling. Returns logits
  // [n, V] f32 for n = forced.size(): row i is the next-token distribution after the prompt and
  // forced[0..i), i.e. what greedy decoding takes the argmax of at answer position i. The
  // conversation then holds the turn as if `forced` had been generated (current().token_ids,
  // stats), so a later turn continues after it. OUT_OF_RANGE for a token outside the vocabulary.
  StatusOr<Tensor> ScoreTurn(Conversation& conversation, std::span<const Message> messages,
                             std::span<const int32_t> forced);

  // Snapshot and restore (engine/runtime/conversation_snapshot.cc; format in kv/page_codec.h).
  // ExportConversation encodes what the conversation added to its KV and history since `since`
  // (a default mark = everything) as one segment of blocks of at most `max_block_bytes`.
  // FAILED_PRECONDITION while it is decoding a turn.
  StatusOr<ConversationSegment> ExportConversation(const Conversation& conversation,
                                                   const kv::SegmentMark& since,
                                                   size_t max_block_bytes) const;
  // A new conversation holding the KV, history and position of `segments` (commits 0..N in
  // order): its cached_tokens() equals the restored prefix, so the next turn prefills only its new
  // messages. INVALID_ARGUMENT for segments of another model/layout or out of order, DATA_LOSS
  // never (decode first: kv::DecodeSegment), RESOURCE_EXHAUSTED when the KV pool is full. Nothing
  // stays allocated on an error.
  StatusOr<RestoredConversation> RestoreConversation(std::span<const kv::DecodedSegment> segments);

 private:
  Engine() = default;
  using PreparedTurn = internal::PreparedTurn;
  using PendingStart = internal::TurnStart;
  StatusOr<PreparedTurn> Prepare(Conversation& c, std::span<const Message> messages);
  // StartTurn before the prefill (checks, sampling parameters, Prepare) and after it (history,
  // stats, sampler, the first token from `logits` [1, V]).
  StatusOr<PendingStart> BeginTurn(Conversation& c, std::span<const Message> messages,
                                   const TurnOptions& options);
  StatusOr<StepOutput> FinishStart(Conversation& c, PendingStart& pending, Tensor& logits,
                                   double prefill_ms);
  // The conversation's next token from `logits` [1, V] on the decoder's device (modified in place,
  // as Sampler::Sample modifies them).
  StatusOr<int32_t> SampleNext(Conversation& c, Tensor& logits);
  StatusOr<Tensor> EncodeVisual(const VisualInput& v, int64_t expected_rows) const;
  StepOutput Accept(Conversation& c, int32_t token);
  // After a failed step: `c` stops starting or decoding and refuses every further use.
  static void MarkBroken(Conversation& c);

  EngineOptions options_;
  size_t weight_bytes_ = 0;
  model::LlavaConfig config_;
  model::PreprocessorConfig preprocessor_;
  model::ModelWeights weights_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  std::unique_ptr<model::ChatTemplate> template_;
  vision::LlavaVisionWeights vision_weights_;
  std::unique_ptr<llm::Decoder> decoder_;
  std::unique_ptr<kv::KvPools> pools_;
  std::string assistant_close_;  // the template's text after an assistant reply ("<|im_end|>\n")
};

}  // namespace framezip::engine::runtime
