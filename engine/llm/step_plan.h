// DecodeStepPlan: everything a step's decode rows need from the host, built once before the step
// runs and sent to the device in one upload, so no layer of the step copies, allocates host
// memory or waits (in the spirit of vLLM's and FlashInfer's plan/run split: the host plans, the
// device runs).
//
// What it holds, in one arena (host-built, then one copy on the device):
//   positions  [rows] i32, every row of the step (decode rows first, then prefill chunks);
//   token ids  [decode rows] i32, checked against the vocabulary on the host before the upload;
//   sampling   when the step samples its decode rows itself (Decoder::MixedStep's `sampled`):
//              each row's parameters and penalised ids as the sampling kernel reads them
//              (ops::PackSampling), and the slots its tokens are written to;
//   per layer  the KV slot of each decode row (ops::KvSlot: where this step's K/V go, assigned
//              ahead by kv::SequenceKv::AppendDecodeSlot) and the paged decode attention's
//              descriptors over every sequence's pages including that slot
//              (ops::PlanPagedDecode: spans on the CPU; span descriptors and split-K work items
//              on a GPU);
//   workspace  the GPU attention's partial results, sized for the largest layer (device only).
// The plan is device-agnostic: the CPU builds and consumes the same plan (its "upload" is a copy
// into the plan's device-side buffer, counted like the GPU's), so the CPU tests exercise the code
// a GPU step runs and count its copies and synchronisations (engine/core/step_counters.h).
//
// Which steps are planned: a step whose decode rows all belong to sequences whose policy stores
// every decode token in every layer (CompressionPolicy::StoresEveryDecodeToken) in a dense full
// format. AttentionPack's low-rank blocks do not stop a plan: the planned paged attention gives
// the pages' share with its log-sum-exp and the blocks' shares merge into it. The others run
// eagerly, layer by layer (a policy that decides per layer during the step: Dynamic-LLaVA's
// decode-token predictor); docs/architecture.md names them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/llm/kv_backend.h"
#include "engine/ops/kv_slots.h"
#include "engine/ops/paged_attention.h"
#include "engine/ops/sample.h"

namespace framezip::engine::llm {

class DecodeStepPlan {
 public:
  DecodeStepPlan() = default;
  ~DecodeStepPlan();
  DecodeStepPlan(const DecodeStepPlan&) = delete;
  DecodeStepPlan& operator=(const DecodeStepPlan&) = delete;

  // The pages the step set aside (KvBackend::Reserve before planning; the plan's slots came
  // from them). Given back when the plan goes out of scope.
  StepReservation& reservation() { return reservation_; }

  // On the decoder's device, valid while the plan lives.
  const Tensor& positions() const { return positions_; }
  const Tensor& token_ids() const { return token_ids_; }
  std::span<const int32_t> host_token_ids() const { return host_token_ids_; }
  int64_t decode_rows() const { return decode_rows_; }
  const ops::KvSlot* slots(int layer) const;
  const ops::PagedDecodePlan& attention(int layer) const {
    return attention_[static_cast<size_t>(layer)];
  }
  // The sampling parameters on the device (all null when the plan holds none).
  const ops::PlannedSampling& sampling() const { return sampling_; }
  const std::byte* device_arena() const;
  float* workspace() const { return workspace_; }
  // Bytes sent in the step's upload.
  size_t upload_bytes() const { return host_.size(); }

 private:
  friend class KvBackend;
  StepReservation reservation_;
  std::vector<std::byte> host_;    // the arena as built on the host
  std::shared_ptr<void> staging_;  // host memory it is uploaded from (page-locked for a GPU)
  size_t staging_bytes_ = 0;
  StagingPool* staging_owner_ = nullptr;              // takes staging_ back
  Tensor device_;                                     // the arena on the device, then the workspace
  float* workspace_ = nullptr;
  Tensor positions_, token_ids_;
  std::vector<int32_t> host_token_ids_;
  int64_t decode_rows_ = 0;
  std::vector<size_t> slot_offsets_;  // per layer, in the arena
  std::vector<ops::PagedDecodePlan> attention_;
  ops::PlannedSampling sampling_;
};

}  // namespace framezip::engine::llm
