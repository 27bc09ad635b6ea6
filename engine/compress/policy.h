// CompressionPolicy: the hook through which KV-compression methods (ZipVL, AttentionPack,
// Dynamic-LLaVA, FastV, KIVI; docs/methods.md) steer what the decoder keeps in the KV cache.
//
// One policy object per sequence (it may keep per-sequence state: accumulated attention scores,
// kept index sets). The decoder calls it:
//   - OnPrefillLayer, once per layer and prefill chunk, after q/k/v are projected and rotated and
//     before attention and the KV write. The policy sees the chunk's attention inputs and may
//     decide which of the chunk's tokens this layer stores (keep mask; ragged layers).
//     PlanPrefillLayer wraps it and may also ask for sparse prefill attention (ZipVL, FastV).
//   - OnDecodeWrite, once per layer and decode step, before the new token's K/V is stored; false
//     means "attend to it this step but do not store it" (Dynamic-LLaVA write gating).
//   - Row selection (Dynamic-LLaVA), for a policy whose RowSelectionLayer() is a layer l: at the
//     entry of layer l the policy sees the hidden states (the residual stream) of every prefill
//     chunk (SelectPrefillRows) and may remove rows from the rest of the forward — no attention,
//     no MLP, no KV in layers >= l; positions of the rows that stay are unchanged — and sees each
//     decode token's hidden row (OnDecodeHidden) before OnDecodeWrite of layers >= l.
//
// Thread-safety: a policy is used by one sequence, from one engine step at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/compress/policy_config.h"
#include "engine/core/tensor.h"
#include "engine/kv/kv_format.h"
#include "engine/kv/low_rank_factor.h"

namespace framezip::engine::compress {

class DynamicLlavaPredictors;

// What a model brings to the policies that need more than q/k/v: learned predictors. Built by
// the runtime when it loads a model directory; a policy that needs an absent resource refuses
// with `missing_reason`.
struct PolicyResources {
  std::shared_ptr<const DynamicLlavaPredictors> dynamic_llava;
  std::string dynamic_llava_missing = "no Dynamic-LLaVA predictors were loaded";
};

// The attention inputs of one layer for one prefill chunk (views valid during the call).
struct PrefillLayerInputs {
  int layer = 0;
  const Tensor* q = nullptr;           // [T, H, d] f32, post-RoPE
  const Tensor* k = nullptr;           // [T, G, d] f32, post-RoPE
  const Tensor* v = nullptr;           // [T, G, d] f32
  const int32_t* positions = nullptr;  // [T] positions of the chunk's tokens
  int64_t past_tokens = 0;             // tokens this layer already stores for the sequence
  // [T] 1 for rows holding visual features (image/video placeholders), else 0; null = no visual
  // rows. FastV prunes only these.
  const uint8_t* visual = nullptr;
  int num_layers = 0;  // decoder layers
};

// The residual stream entering a layer for one prefill chunk (SelectPrefillRows).
struct HiddenRowsInputs {
  int layer = 0;
  const Tensor* hidden = nullptr;      // [t, hidden] f32
  const int32_t* positions = nullptr;  // [t]
  const uint8_t* visual = nullptr;     // [t] 1 at visual rows, or null (no visual rows)
};

// A policy's decision for one layer and one prefill chunk (PlanPrefillLayer).
struct PrefillLayerPlan {
  // kv::TokenClass per chunk token; arrives sized T and all kv::kFull.
  std::vector<uint8_t> classes;
  // Sparse prefill: when set, attention runs only over the compacted Q[T], K[T], V[T] (plus the
  // tokens the layer already stores from earlier chunks) instead of all T rows. `important` holds
  // T as chunk-local indices, sorted ascending. With `important_per_kv_head` non-empty (G lists,
  // each sorted) every KV head group uses its own T instead, and `important` is ignored.
  bool sparse = false;
  std::vector<int32_t> important;
  std::vector<std::vector<int32_t>> important_per_kv_head;
  URows u_rows = URows::kSkip;
  int64_t u_window = 64;  // kLocal: recent keys each U row sees (its own included)
  int64_t u_sinks = 4;    // kLocal: leading keys of the sequence each U row sees
  // AttentionPack: chunk-local rows (ascending) the layer stores as one low-rank block (keys
  // pre-RoPE and values factorised at these ranks, kv/low_rank_block.h) instead of in pages; their
  // classes are kDrop. The chunk's own attention still reads them exactly.
  std::vector<int32_t> low_rank_rows;
  int low_rank_k = 0;
  int low_rank_v = 0;
  kv::FactorFormat low_rank_factors = kv::FactorFormat::kF16;
  uint64_t low_rank_seed = 0;
};

// Ranks, factor format and seed of a low-rank block built outside a prefill plan.
struct LowRankSpec {
  int rank_k = 0;
  int rank_v = 0;
  kv::FactorFormat factors = kv::FactorFormat::kF16;
  uint64_t seed = 0;
};

// Per-layer figures of the prefills a sequence ran (the decoder accumulates them over chunks;
// the runtime resets them per turn and reports them in TurnStats).
struct PrefillStats {
  std::vector<int64_t> tokens;  // per layer: prefilled tokens that ran through the layer
  std::vector<int64_t> kept;    // per layer: of them stored as kFull or kImportant
  std::vector<int64_t> visual;  // per layer: of them visual rows
  double selection_ms = 0;      // time spent planning (probe attention, top-p, predictors, ...)
  int64_t fed = 0;              // prefill rows fed (before any row selection)
  // Decode tokens the policy did not store in the last layer (Dynamic-LLaVA's text gating).
  int64_t decode_unstored = 0;
  // AttentionPack: time factorising blocks (prefill) and attending to them (decode).
  double low_rank_build_ms = 0;
  double low_rank_attend_ms = 0;
  // AttentionPack: prefill blocks the KV budget could not hold, whose rows went to full-precision
  // pages instead (one per layer and chunk).
  int64_t low_rank_fallbacks = 0;

  void Reset(int num_layers) {
    tokens.assign(static_cast<size_t>(num_layers), 0);
    kept.assign(static_cast<size_t>(num_layers), 0);
    visual.assign(static_cast<size_t>(num_layers), 0);
    selection_ms = 0;
    fed = 0;
    decode_unstored = 0;
    low_rank_build_ms = 0;
    low_rank_attend_ms = 0;
    low_rank_fallbacks = 0;
  }
  // kept / tokens per layer (1 for a layer that saw no tokens).
  std::vector<float> KeptRatios() const;
};

// What decode keeps of one low-rank block between steps (kv::LowRankBlock's fields), handed to
// the policy after each step's attention over it.
struct LowRankDecodeState {
  std::span<float> importance;      // [T] attention-importance EMA
  std::span<uint16_t> value_ranks;  // [T] rank each value is read at, <= full_rank
  int full_rank = 0;
  uint32_t* decode_steps = nullptr;  // steps the block has been attended (not stored)
};

class CompressionPolicy {
 public:
  virtual ~CompressionPolicy() = default;

  // The name reported in turn stats ("none", "zipvl", ...).
  virtual std::string_view name() const = 0;

  // Whether the policy reads its inputs (PrefillLayerInputs' tensors, ClassifyResidual's rows) on
  // `device` itself. Where it does not, a decoder on that device hands it host copies: correct,
  // at the price of the copies. "none" reads nothing, so it runs anywhere.
  virtual bool RunsOn(Device device) const { return device.is_cpu(); }
  // The page formats this policy stores its token classes in, given the engine's full-precision
  // KV format (f16 or f32).
  virtual kv::KvPrecision Precision(kv::KvFormat full) const { return {full, full, full}; }

  // Fills keep[0..T) with a kv::TokenClass per token (kDrop = not stored in this layer, kFull,
  // kImportant, kRest). `keep` arrives sized T and all kv::kFull.
  virtual Status OnPrefillLayer(const PrefillLayerInputs& inputs, std::vector<uint8_t>& keep) = 0;

  // What the decoder calls: the token classes plus, optionally, a sparse attention plan. The
  // default fills plan.classes through OnPrefillLayer and keeps attention dense; policies that
  // sparsify prefill (zipvl, fastv) override it.
  virtual Status PlanPrefillLayer(const PrefillLayerInputs& inputs, PrefillLayerPlan& plan) {
    return OnPrefillLayer(inputs, plan.classes);
  }

  // Whether the decode token at `position` is stored in `layer`.
  virtual bool OnDecodeWrite(int layer, int32_t position) = 0;
  // True when OnDecodeWrite is true for every layer and position whatever happens during a step,
  // so a step plan may take every layer's slot for the token before the step runs
  // (engine/llm/step_plan.h). A policy that decides during the step stays false (eager steps).
  virtual bool StoresEveryDecodeToken() const { return false; }

  // AttentionPack, after a decode step's attention over a low-rank block of `layer`:
  // mean_probs[t] is the attention its token t got, averaged over query heads; the policy updates
  // the block's importance and the rank (<= full_rank) each value is read at from the next step.
  virtual void OnLowRankAttention(int /*layer*/, std::span<const float> /*mean_probs*/,
                                  const LowRankDecodeState& /*block*/) {}

  // Row selection: the layer at whose entry SelectPrefillRows / OnDecodeHidden are called, or -1
  // (the default: the policy never removes rows).
  virtual int RowSelectionLayer() const { return -1; }
  // keep[0..t) arrives all 1; a 0 removes that row of the chunk from layers >= the selection
  // layer. inputs.hidden is on the decoder's device when RunsOn(it), else a host copy.
  virtual Status SelectPrefillRows(const HiddenRowsInputs& /*inputs*/,
                                   std::vector<uint8_t>& /*keep*/) {
    return absl::OkStatus();
  }
  // hidden [1, hidden] f32: the decode token at `position` entering the selection layer.
  virtual Status OnDecodeHidden(const Tensor& /*hidden*/, int32_t /*position*/) {
    return absl::OkStatus();
  }

  // Decode residual window (docs/methods.md §1.2, KIVI's R): decode tokens are stored as
  // kv::kFull; once a layer holds ResidualWindow() of them, the decoder asks ClassifyResidual for
  // their classes and recompresses them into the class formats. 0 = never recompress.
  virtual int ResidualWindow() const { return 0; }

  // AttentionPack's recompression (docs/methods.md §2.2 item 7, T_p): a spec instead moves the
  // whole full window of `layer` into one new low-rank block at these ranks (ClassifyResidual is
  // then not asked). nullopt: classify as usual.
  virtual std::optional<LowRankSpec> ResidualLowRank(int /*layer*/) const { return std::nullopt; }

  // classes[i] (kv::TokenClass) for the window's n = k.dim(0) tokens, oldest first. q: the
  // current decode token's query [1, H, d]; k: the window's keys [n, G, d]; both f32, post-RoPE,
  // on the decoder's device where RunsOn(it), else host copies.
  virtual Status ClassifyResidual(int /*layer*/, const Tensor& /*q*/, const Tensor& k,
                                  std::vector<uint8_t>& classes) {
    classes.assign(static_cast<size_t>(k.dim(0)), kv::kImportant);
    return absl::OkStatus();
  }
};

// "none": keeps everything.
class NonePolicy final : public CompressionPolicy {
 public:
  std::string_view name() const override { return "none"; }
  bool RunsOn(Device) const override { return true; }
  Status OnPrefillLayer(const PrefillLayerInputs&, std::vector<uint8_t>&) override {
    return absl::OkStatus();
  }
  bool OnDecodeWrite(int, int32_t) override { return true; }
  bool StoresEveryDecodeToken() const override { return true; }
};

// A fresh policy for one sequence. INVALID_ARGUMENT naming an option outside its range
// (ValidatePolicyConfig); FAILED_PRECONDITION when the policy needs a resource the model does not
// have (dynamic_llava without predictors).
StatusOr<std::unique_ptr<CompressionPolicy>> CreatePolicy(const PolicyConfig& config,
                                                          const PolicyResources& resources = {});
// The same from the CLI's form "name" or "name:key=value,..." (ParsePolicyConfig), e.g.
// "zipvl:tau=0.97,u_rows=attend".
StatusOr<std::unique_ptr<CompressionPolicy>> CreatePolicy(std::string_view spec,
                                                          const PolicyResources& resources = {});

}  // namespace framezip::engine::compress
