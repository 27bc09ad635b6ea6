// LowRankKv: AttentionPack's low-rank KV (compress/attentionpack.h), the one KV kind of a
// sequence that is not read as pages. A layer's blocks are stored from a prefill chunk's visual
// rows and from the decode residual window, and attended at decode as shares of one softmax with
// the layer's pages. KvBackend (kv_backend.h) owns one and hands it the layers that hold blocks;
// the paged formats (f32/f16, int4/int2) stay with KvBackend's mixed-format paged attention, which
// reads them in one pass and gives the pages' share with its log-sum-exp for the merge.
//
// Blocks are built and kept on the host on every device (kv/low_rank_block.h); a GPU decoder
// reads them through its device copies (device_low_rank_block.h) with the fused CUDA kernel.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/compress/policy.h"
#include "engine/core/device.h"
#include "engine/core/staging_pool.h"
#include "engine/core/tensor.h"
#include "engine/llm/decoder_shape.h"
#include "engine/llm/sequence.h"
#include "engine/ops/low_rank.h"

namespace framezip::engine::llm {

class LowRankKv {
 public:
  LowRankKv(const DecoderShape& shape, Device device)
      : shape_(shape), device_(device), staging_(device) {}

  // Rows plan.low_rank_rows (chunk-local) of this chunk's k (post-RoPE) and v [t, G, d], on the
  // decoder's device, become one low-rank block of layer l (factorised on the host).
  // RESOURCE_EXHAUSTED when the KV budget cannot hold the block: nothing was stored.
  Status StoreChunkRows(int l, Sequence& seq, std::span<const int32_t> positions,
                        const compress::PrefillLayerPlan& plan, const Tensor& k,
                        const Tensor& v) const;

  // The residual window's recompression: layer l's full window (text and generated tokens)
  // becomes one more block at `spec`, and its full pages are freed. When the KV budget cannot
  // hold the block the window stays as it is, for a later step.
  Status StoreResidual(int l, Sequence& seq, const compress::LowRankSpec& spec) const;

  // Decode attention of one sequence whose layer l holds blocks, completed: `attn` [nh, d] holds
  // the share of the layer's pages (and of this step's row when it was not stored), normalised,
  // with its log-sum-exp `pages_lse` [nh] (ops::PagedDecodeAttention's, for the whole batch).
  // Each block is attended without being rebuilt (ops::LowRankBlockAttend on the CPU, the fused
  // kernel over the sequence's device_blocks on a GPU), the shares merge into `attn` in place
  // (ops::MergeAttentionParts), and the policy sees each block token's head-averaged probability
  // (ops::AttentionTokenShares). q [nh, d] post-RoPE; all on the decoder's device. Nothing of K,
  // V or the shares comes to the host: the blocks' token probabilities stay in the step's buffer
  // on the device (low_rank_statistics.h) until SettleStatistics.
  Status AttendDecode(int l, Sequence& seq, const Tensor& q, const Tensor& pages_lse,
                      Tensor& attn) const;

  // Hands each sequence's policy the statistics of every layer AttendDecode attended since the
  // last call (OnLowRankAttention, in layer order): one copy per sequence to page-locked host
  // memory and one wait for the device for them all. The decoder calls it when a step's layers
  // are done (also after a failed layer). On an error the statistics are dropped, not kept.
  Status SettleStatistics(std::span<Sequence* const> seqs) const;
  Status SettleStatistics(Sequence& seq) const;

 private:
  // Device floats for `floats` more probabilities of this step in seq's statistics buffer (made,
  // sized for every layer's blocks, at the step's first block-holding layer; one that cannot
  // hold them is settled first).
  StatusOr<float*> StageFloats(Sequence& seq, size_t floats) const;
  StatusOr<Tensor> Empty(Shape shape) const;

  DecoderShape shape_;
  Device device_;
  // Page-locked buffers the statistics come down into, kept for the next steps (page-locked
  // memory takes milliseconds to get).
  mutable StagingPool staging_;
};

}  // namespace framezip::engine::llm
