// KvBackend: the KV side of one decoder, on the decoder's device — what that device's attention
// kernels can read, the pages a step takes, and the compression policies' plans carried out over
// a sequence's cache (in the spirit of vLLM's attention backends and llama.cpp's llama_memory_i).
//
// The decoder's one layer body (decoder.cc, Decoder::RunLayer) computes q/k/v over every row of a
// step and hands each sequence's rows here; everything that reads or writes pages happens behind
// this class, the same code on the CPU and on a GPU:
//   prefill chunk  the policy's plan (compress::PrefillLayerPlan); dense attention, or sparse
//                  attention over the important rows with the rest local / attending / skipped
//                  (ops::SparsePrefillAttention); the per-class, per-format append; AttentionPack's
//                  low-rank block (kv_backend_attend.cc; the blocks are LowRankKv's,
//                  low_rank_kv.h);
//   decode rows    the kFull write (or none, as the policy says); one mixed-format paged attention
//                  over every sequence's pages (ops::PagedDecodeAttention); the residual window's
//                  recompression (docs/methods.md §1.2).
// What it supports is declared once (capabilities()) and checked where a mismatch would otherwise
// surface mid-request: at Create (the device's paged decode kernels take the head size) and when a
// sequence's pools are attached (CheckPool: shape, device, page format).
//
// Pages come from the sequence's pools (kv::KvPools: one pool per format, on this device). A step's
// pages are reserved all or nothing before it writes (Reserve), so a step the pools cannot serve
// changes no cache.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/compress/policy.h"
#include "engine/core/device.h"
#include "engine/core/staging_pool.h"
#include "engine/core/tensor.h"
#include "engine/kv/kv_format.h"
#include "engine/kv/page_pool.h"
#include "engine/llm/decoder_shape.h"
#include "engine/llm/low_rank_kv.h"
#include "engine/llm/sequence.h"
#include "engine/ops/sample.h"

namespace framezip::engine::llm {

class DecodeStepPlan;

// What a step asks of one sequence's cache: `tokens` appended to every layer, as a prefill chunk
// (`classified`: the policy picks each token's class, so its format, layer by layer) or as decode
// tokens (stored kFull).
struct StepDemand {
  Sequence* seq = nullptr;
  int64_t tokens = 0;
  bool classified = false;
};

// The pages a step set aside (KvBackend::Reserve), given back when it goes out of scope: the
// step's appends took what they used, the rest returns to the pools.
class StepReservation {
 public:
  StepReservation() = default;
  ~StepReservation();
  StepReservation(const StepReservation&) = delete;
  StepReservation& operator=(const StepReservation&) = delete;

 private:
  friend class KvBackend;
  std::vector<Sequence*> seqs_;
};

class KvBackend {
 public:
  struct Capabilities {
    Device device;
    int64_t head_dim = 0;
    // Page formats the device's kernels read and write (quantised ones need head_dim % 32 == 0).
    std::vector<kv::KvFormat> page_formats;
  };

  // UNIMPLEMENTED, naming the head size and what the device takes, when the device's paged decode
  // kernels are not built for this model's head size: a model the device cannot serve fails at
  // load, not at its first decode step.
  static StatusOr<std::unique_ptr<KvBackend>> Create(const DecoderShape& shape, Device device,
                                                     bool bf16_attention);

  ~KvBackend();

  const Capabilities& capabilities() const { return capabilities_; }
  Device device() const { return device_; }

  // `values` as an i32 tensor on the device: on a GPU sent from page-locked memory in one
  // asynchronous copy on framezip's stream (no host wait; later ops on the stream see it), on
  // the CPU a copy in host memory. An eager step's positions and token ids go up this way.
  StatusOr<Tensor> UploadInts(std::span<const int32_t> values) const;

  // Whether a pool of `layout` on `pool_device` can hold this model's pages for these kernels:
  // INVALID_ARGUMENT naming the mismatch (heads × dims, device, or a format not in capabilities).
  Status CheckPool(const kv::PageLayout& layout, Device pool_device) const;

  // Sets aside, for every demand, the pages its appends could need in every layer
  // (kv::SequenceKv::ReserveAppend), all or nothing over the demands: on a refusal
  // (RESOURCE_EXHAUSTED naming the format and layer) the reserves of the demands' sequences are
  // released and no cache has changed. Reserving again for pages already set aside takes nothing
  // more, so a caller may reserve before the decoder's own step does. `held` gives the reserves
  // back when it goes out of scope.
  Status Reserve(std::span<const StepDemand> demands, StepReservation& held) const;

  // The middle of a prefill layer for one sequence: the policy's plan, attention of this chunk's
  // q [t, nh, d] (post-RoPE) over the sequence's cache plus k/v [t, G, d], the KV append.
  // positions [t] (host), visual [t] (host) or null. Writes attn [t, nh, d].
  Status AttendPrefillChunk(int l, Sequence& seq, std::span<const int32_t> positions,
                            const uint8_t* visual, const Tensor& q, const Tensor& k,
                            const Tensor& v, Tensor& attn) const;

  // The middle of a decode layer for the batch `seqs` (row i of q/k/v/attn belongs to seqs[i]):
  // store (or not, as the policy says) each new token kFull, one paged attention over every
  // sequence's pages (where a sequence's layer holds AttentionPack blocks, their shares merge in:
  // LowRankKv::AttendDecode), then the residual-window recompression. q [b, nh, d] post-RoPE,
  // k/v [b, G, d], positions [b] (host); writes attn [b, nh, d].
  Status AttendDecodeRows(int l, std::span<Sequence* const> seqs,
                          std::span<const int32_t> positions, const Tensor& q, const Tensor& k,
                          const Tensor& v, Tensor& attn) const;

  // Step plans (step_plan.h). Whether the decode rows of `seqs` can be planned ahead: every
  // sequence's policy stores each decode token in every layer and its full format is dense.
  // (AttentionPack's blocks are attended beside the planned pages' share and merged with it.)
  bool CanPlanDecode(std::span<Sequence* const> seqs) const;
  // After Reserve(every demand of the step, plan.reservation()): takes each decode token's slot
  // in every layer (positions[i] is seqs[i]'s), serialises the slots, every layer's paged decode
  // descriptors, the step's positions (all `positions`: decode rows first) and token_ids into one
  // arena and uploads it in one copy. The token ids must have been checked against the
  // vocabulary. `sampling` (empty, or the rows the step will sample, in the order of the logits
  // rows it samples) goes into the same upload. Once it returns OK the sequences count the step's
  // tokens: the step must run.
  Status PlanDecode(std::span<Sequence* const> seqs, std::span<const int32_t> positions,
                    std::span<const int32_t> token_ids, std::span<const ops::RowSampling> sampling,
                    DecodeStepPlan& plan) const;
  // Hands each sequence's policy the AttentionPack statistics its layers gathered this step
  // (LowRankKv::SettleStatistics): the decoder calls it once a step's layers are done.
  Status SettleStatistics(std::span<Sequence* const> seqs) const;

  // AttendDecodeRows for a planned step: the batch's KV write (one launch into the planned
  // slots), one paged attention from the plan's descriptors, then the residual window's
  // recompression as AttendDecodeRows does it.
  Status AttendDecodePlanned(int l, std::span<Sequence* const> seqs, const DecodeStepPlan& plan,
                             const Tensor& q, const Tensor& k, const Tensor& v,
                             Tensor& attn) const;

  // Upload buffers of step plans, reused: page-locked memory takes milliseconds to get.

 private:
  // The residual window's recompression of layer l, for each sequence whose window is full
  // (q: the step's decode queries [b, nh, d], row i seqs[i]'s).
  Status RecompressResiduals(int l, std::span<Sequence* const> seqs, const Tensor& q) const;
  KvBackend(const DecoderShape& shape, Device device, bool bf16_attention);

  // Whether any of `seqs` holds AttentionPack blocks in layer l.
  static bool HoldsLowRankBlocks(int l, std::span<Sequence* const> seqs);
  // attn [b, nh, d] holds the pages' share of every row with its log-sum-exp lse [b, nh]; each
  // sequence that holds blocks in layer l merges their shares in (LowRankKv::AttendDecode).
  Status MergeLowRankShares(int l, std::span<Sequence* const> seqs, const Tensor& q,
                            const Tensor& lse, Tensor& attn) const;
  StatusOr<Tensor> Empty(Shape shape) const;

  DecoderShape shape_;
  Device device_;
  Capabilities capabilities_;
  // 16-bit projection weights: the activations already carry bf16-level error, so prefill
  // attention may take a GPU's bf16 tensor cores (ops::AttentionParams; no effect on the CPU).
  bool bf16_attention_ = false;
  // AttentionPack's blocks: the layers that hold them are attended through it.
  LowRankKv low_rank_;
  std::unique_ptr<StagingPool> staging_;  // the step plans' upload buffers
};

}  // namespace framezip::engine::llm
