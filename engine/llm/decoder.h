// Decoder: the Qwen2 / Llama language model (engine/model/README.md) over device-dispatched ops
// and a paged KV cache — the one decoder of the engine, on the CPU and on a GPU.
//
//   h = x + o_proj(Attn(RMSNorm_in(x)))            GQA, half-split RoPE, q/k/v bias (Qwen2)
//   y = h + down(silu(gate(RMSNorm_post(h))) ⊙ up(RMSNorm_post(h)))
//   logits = lm_head(RMSNorm(y_L))                  lm_head may be the (tied) embedding
//
// Activations are f32; weights stay in their stored dtype (f32/bf16/f16, see ops::Linear) and live
// on the decoder's device (copied there at Create when they are elsewhere). The decoder knows no
// model format: a plain shape and weight views (decoder_shape.h); runtime/decoder_loading.h reads
// them from a checkpoint.
//
// One forward: every entry point (MixedStep, DecodeStep, Prefill, PrefillBatch) feeds rows to
// Forward, which runs RunLayer — the one layer body — over all of them. The decoder is stateless
// and const after creation: all per-sequence state (KV pages, position, compression policy) lives
// in a Sequence, so one Decoder serves many sequences: a step advances a batch of them together
// (continuous batching: the weights are read once per step, not once per sequence).
//
// Thread-safety: const methods may run concurrently on DIFFERENT sequences, but the ops share
// ComputePool(), whose loops are serialised — concurrency gains nothing; batch instead.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/compress/policy.h"
#include "engine/core/tensor.h"
#include "engine/kv/kv_pools.h"
#include "engine/kv/page_pool.h"
#include "engine/kv/sequence_kv.h"
#include "engine/llm/decoder_shape.h"
#include "engine/llm/kv_backend.h"
#include "engine/llm/sequence.h"
#include "engine/llm/step_plan.h"

namespace framezip::engine::llm {

struct PrefillOptions {
  // Tokens per chunk (0 = all at once). Chunks attend to earlier chunks through the KV cache;
  // results equal one-shot prefill up to f32 rounding.
  int64_t chunk_tokens = 0;
  // Logits for every input position ([T, V]) instead of the last one only ([1, V]).
  // FAILED_PRECONDITION when the sequence's policy removes rows (dynamic_llava).
  bool all_logits = false;
  // When set, receives L + 1 tensors [T, H] exactly like HF's output_hidden_states: the input
  // embeddings, the output of layers 0..L-2, and the FINAL-NORMED output of the last layer.
  std::vector<Tensor>* hidden_states = nullptr;
  // [T] 1 for rows holding visual features (empty = none); handed to the compression policy
  // (FastV prunes only these).
  std::span<const uint8_t> visual = {};
};

// One sequence's share of a mixed step (Decoder::MixedStep): a prefill chunk or one decode token.
struct StepInput {
  Sequence* seq = nullptr;
  // A prefill chunk: rows [t >= 1, H] f32 (token embeddings with visual features merged in) fed at
  // positions seq->length .. seq->length + t - 1. Undefined: a decode step feeding `token`.
  Tensor embeds;
  std::span<const uint8_t> visual = {};  // prefill: [t] 1 at visual rows, or empty
  // Prefill: whether the chunk's last row needs logits (the prompt's last chunk); lm_head is not
  // run on a chunk that does not. Decode rows always get logits.
  bool logits = true;
  int32_t token = 0;  // decode: the token fed at seq->length
};

// How a layer's q/k/v and gate/up projections are run. Fused: each group's weights concatenated
// at load into one GEMM, its output split and rotated in one pass (ops::RopeSplitQkv) and gated in
// one (ops::SiluMulHalves). On a GPU, where a 16-bit Linear is a cast of its input, the GEMM and a
// bias add, q/k/v take 4 launches instead of 11 and gate/up 3 instead of 5. Separate: the
// checkpoint's tensors as they are, the weights left where they lie (views of the file on the
// CPU; a fused copy would be another 0.47 GB for the 0.5B shape beside the packed layout the CPU
// GEMMs make anyway). kDeviceDefault: fused on a GPU, separate on the CPU. 16-bit and f32 weights
// only: int8 weights (per-channel scales) and groups whose biases are partly present stay
// separate.
enum class ProjectionLayout : uint8_t { kDeviceDefault, kSeparate, kFused };

class Decoder {
 public:
  // Checks the shape and every tensor's shape against it (INVALID_ARGUMENT naming the first bad
  // one), then places the weights on `device` (views when they are there already; a tied lm_head
  // stays one copy). RESOURCE_EXHAUSTED when the device memory runs out; UNIMPLEMENTED or
  // UNAVAILABLE for a CUDA device without CUDA support or without a GPU.
  static StatusOr<std::unique_ptr<Decoder>> Create(
      const DecoderShape& shape, DecoderWeights weights, Device device = Device::Cpu(),
      ProjectionLayout projections = ProjectionLayout::kDeviceDefault);

  const DecoderShape& shape() const { return shape_; }
  const DecoderWeights& weights() const { return weights_; }
  Device device() const { return device_; }
  // Bytes of weights this decoder copied to its device (0 when it holds views).
  size_t weight_bytes() const { return weight_bytes_; }
  // Whether the layers run fused projections (ProjectionLayout::kFused, as Create resolved it).
  bool fused_projections() const { return fused_projections_; }

  // What the model brings to policies that need more than q/k/v (Dynamic-LLaVA's predictors),
  // handed to every policy NewSequence creates. Set once, before sequences are made.
  void set_policy_resources(compress::PolicyResources resources) {
    policy_resources_ = std::move(resources);
  }
  const compress::PolicyResources& policy_resources() const { return policy_resources_; }

  // Whether decode steps are planned ahead (step_plan.h) where every decode row's policy allows
  // it: on by default; off runs every step eagerly, layer by layer (the reference the planned
  // step is tested against, and a way out should a plan misbehave). Set before steps run.
  void set_step_plans(bool on) { step_plans_ = on; }
  bool step_plans() const { return step_plans_; }

  // The KV side of every layer on this decoder's device: what its kernels read (capabilities),
  // the pages a step reserves, the policies' plans carried out over a sequence's cache.
  const KvBackend& kv_backend() const { return *kv_; }

  // The KV page layout of this model for `format` and `page_tokens` slots per page.
  kv::PageLayout KvLayout(kv::KvFormat format, int page_tokens = 32) const;

  // A fresh, empty sequence whose pages come from `pool` (which must outlive it) and whose
  // compression policy is `policy`. INVALID_ARGUMENT when the pool's layout does not fit this
  // model, its pages are on another device than the decoder's, or an option is out of range.
  StatusOr<std::unique_ptr<Sequence>> NewSequence(kv::PagePool* pool,
                                                  const compress::PolicyConfig& policy) const;
  // A fresh sequence storing each token class in the format the policy's Precision(full) asks
  // for, pages from `pools` (which must outlive it). INVALID_ARGUMENT when a needed format has no
  // pool (e.g. int2 with head_dim % 32 != 0), the shape does not fit or an option is out of range.
  StatusOr<std::unique_ptr<Sequence>> NewSequence(const kv::KvPools& pools, kv::KvFormat full,
                                                  const compress::PolicyConfig& policy) const;
  // The same with the policy in the CLI's form ("zipvl:tau=0.9", compress::ParsePolicyConfig);
  // INVALID_ARGUMENT also for an unknown policy or option.
  StatusOr<std::unique_ptr<Sequence>> NewSequence(kv::PagePool* pool,
                                                  std::string_view policy = "none") const;
  StatusOr<std::unique_ptr<Sequence>> NewSequence(const kv::KvPools& pools, kv::KvFormat full,
                                                  std::string_view policy = "none") const;

  // Token embeddings: ids [T] i32 -> out [T, H] f32. OUT_OF_RANGE for an id outside the vocab.
  Status Embed(const Tensor& ids, Tensor& out) const;
  StatusOr<Tensor> Embed(std::span<const int32_t> ids) const;

  // Runs `embeds` [T, H] f32 (token embeddings, with visual features already merged in at their
  // placeholder positions) through the model at positions seq.length .. seq.length+T-1, appends
  // their K/V to seq.kv (as the policy allows) and advances seq.length by T.
  // The policy plans each layer of each chunk (compress::PrefillLayerPlan): which tokens the layer
  // stores in which format, and optionally a sparse attention over an important subset (ZipVL,
  // FastV; ops::SparsePrefillAttention), the linear layers and MLP staying dense. With chunking
  // each chunk is planned on its own and attends to what earlier chunks stored (compress/zipvl.h).
  // Returns logits [1, V] of the last position, or [T, V] with options.all_logits (PrefillBatch of
  // one). RESOURCE_EXHAUSTED when the KV pools cannot supply a chunk's pages (see MixedStep): the
  // refused chunk stores nothing, but earlier chunks stay, so the sequence holds part of the
  // prompt (Clear it).
  StatusOr<Tensor> Prefill(Sequence& seq, const Tensor& embeds,
                           const PrefillOptions& options = {}) const;

  // Prefill of several sequences at once (continuous batching): seqs[i] gets embeds[i] with
  // options[i] (`options` empty = defaults for all). The
  // dense work of each layer (norms, q/k/v/o projections, MLP, lm_head) runs ONCE over the
  // concatenated rows of all sequences, so the weights are read once per layer, not once per
  // sequence; RoPE positions, the policy's plan, attention and the KV append stay per sequence on
  // its own rows. With chunking, round r feeds chunk r of every sequence that has one. Results
  // equal separate Prefill calls up to f32 rounding. Returns each sequence's logits as Prefill
  // does. Sequences must be distinct. RESOURCE_EXHAUSTED as Prefill's, per round of chunks.
  StatusOr<std::vector<Tensor>> PrefillBatch(std::span<Sequence* const> seqs,
                                             std::span<const Tensor> embeds,
                                             std::span<const PrefillOptions> options = {}) const;

  // One decode step for a batch (MixedStep with decode inputs only): token b is fed to seqs[b] at
  // position seqs[b]->length; every sequence advances by one. Returns logits [B, V]. Sequences must
  // be distinct and may use different page formats (attention reads f32/f16/int4/int2 pages in one
  // pass). The new token is stored kFull; after a layer's attention, a sequence whose policy has a
  // ResidualWindow() R and whose layer now holds R full-precision tokens has them classified
  // (ClassifyResidual, with this token's query) and requantised (SequenceKv::CompressResidual).
  // RESOURCE_EXHAUSTED as MixedStep's.
  StatusOr<Tensor> DecodeStep(std::span<Sequence* const> seqs,
                              std::span<const int32_t> tokens) const;

  // One step of continuous batching with chunked prefill: every input is either a prefill chunk
  // (planned by its sequence's policy and appended exactly as PrefillBatch does one chunk) or one
  // decode token (exactly DecodeStep's semantics: stored kFull, mixed-format paged attention, the
  // policy's residual-window recompression). The dense work of every layer (norms, q/k/v/o
  // projections, MLP) runs ONCE over the rows of all inputs, and lm_head once over the rows that
  // need logits, so the weights are read once per step however decode and prefill are mixed.
  // Results equal separate PrefillBatch (one chunk each) and DecodeStep calls up to f32 rounding.
  // Returns logits [n, V]: row i is inputs[i]'s next-token distribution (its decode token's, or
  // its chunk's last row's); the rows of chunks with logits = false are zero. Sequences must be
  // distinct. Every input's pages are reserved before any layer writes (KvBackend::Reserve): when
  // the pools cannot supply them the step is RESOURCE_EXHAUSTED and no sequence has changed. A
  // residual window the pools cannot requantise (or turn into an AttentionPack block) waits for a
  // later step; an AttentionPack prefill block the budget cannot hold is stored as reserved pages.
  // What can still fail part-way (a device error) leaves the step's sequences unusable: they must
  // not be continued.
  // `sampling`: empty (the caller samples from the logits), or one row per decode input in input
  // order, whose next tokens the step samples itself after lm_head (ops::SampleTokens) into
  // `sampled` (as long), with the parameters in the step's one upload when it is planned
  // (step_plan.h): on a GPU the ids' read-back is then the step's only host wait. The sampled rows
  // are modified in the returned logits as ops::SampleTokens modifies them when every input is a
  // decode row; otherwise they are sampled from a copy.
  StatusOr<Tensor> MixedStep(std::span<const StepInput> inputs,
                             std::span<const ops::RowSampling> sampling = {},
                             std::span<int32_t> sampled = {}) const;

 private:
  Decoder(DecoderShape shape, Device device) : shape_(std::move(shape)), device_(device) {}
  // A sequence without KV yet, with the policy `policy` made from policy_resources_; its row
  // selection layer checked against the model.
  StatusOr<std::unique_ptr<Sequence>> SequenceWithPolicy(
      const compress::PolicyConfig& policy) const;

  // One sequence's rows [row0, row0 + rows) in a (possibly batched) prefill chunk.
  struct PrefillPart {
    Sequence* seq = nullptr;
    int64_t row0 = 0;
    int64_t rows = 0;
    const uint8_t* visual = nullptr;  // [rows] mask of the visual rows, or null
  };
  // The rows of one forward: one decode token of each of `decode` first (contiguous, for the one
  // paged decode attention), then the parts' prefill chunks. host_positions [T] are the rows'
  // positions (each sequence's length onwards).
  struct StepRows {
    std::span<Sequence* const> decode;
    std::span<const PrefillPart> parts;
    std::span<const int32_t> host_positions;
  };
  // What a step of these rows asks of the sequences' caches (KvBackend::Reserve).
  static std::vector<StepDemand> StepDemands(std::span<Sequence* const> decode,
                                             std::span<const PrefillPart> parts);
  // Called with (l + 1, x) after each layer l < L - 1, as HF's output_hidden_states records them.
  using LayerObserver = std::function<Status(int64_t index, const Tensor& x)>;

  // The one forward: x [T, H] f32 on the device through every layer; then every sequence's
  // length advances by its rows. x is updated in place — unless a policy removes rows
  // (SelectRows), when x becomes the remaining rows and row_map (if given; T entries) says where
  // each input row ended up (-1: removed). A removal with an observer is FAILED_PRECONDITION.
  // With a plan (step_plan.h), the step's pages were reserved and its decode rows planned by the
  // caller: Forward reserves nothing, reads the positions and every decode layer's slots and
  // attention descriptors from the plan.
  Status Forward(const StepRows& rows, Tensor& x, const LayerObserver& observer = {},
                 std::vector<int64_t>* row_map = nullptr,
                 const DecodeStepPlan* plan = nullptr) const;
  // Owned storage of a step's rows once some were removed (SelectRows rewrites the StepRows to
  // point into it).
  struct RemainingRows {
    std::vector<PrefillPart> parts;
    std::vector<int32_t> host_positions;
    std::vector<std::vector<uint8_t>> visual;  // per part, when it had a mask
  };
  // At the entry of layer `l`: hands every sequence whose policy selects rows at `l` its hidden
  // rows (decode: OnDecodeHidden; prefill chunk: SelectPrefillRows), then removes the rows the
  // policies dropped from x, positions and `rows` (storage in `remaining`), updating row_map.
  Status SelectRows(int l, StepRows& rows, Tensor& x, Tensor& positions, RemainingRows& remaining,
                    std::vector<int64_t>& row_map) const;
  // The one layer body: x [T, H] in place through layer `l`; positions [T] i32 on the device.
  Status RunLayer(int l, const StepRows& rows, const Tensor& positions, Tensor& x,
                  const DecodeStepPlan* plan) const;
  // Final norm + lm_head on rows of x [T, H] -> [T, V].
  StatusOr<Tensor> Logits(const Tensor& x) const;
  // Final norm + lm_head on the listed rows of x -> [rows.size(), V], in that order.
  StatusOr<Tensor> LogitsOfRows(const Tensor& x, std::span<const int64_t> rows) const;
  StatusOr<Tensor> Empty(Shape shape, DType dtype = DType::kF32) const;

  DecoderShape shape_;
  Device device_;
  DecoderWeights weights_;  // on device_
  size_t weight_bytes_ = 0;
  bool fused_projections_ = false;
  compress::PolicyResources policy_resources_;
  std::unique_ptr<KvBackend> kv_;  // the pages' side of every layer, on device_
  bool step_plans_ = true;
};

}  // namespace framezip::engine::llm
