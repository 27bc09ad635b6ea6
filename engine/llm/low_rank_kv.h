// LowRankKv: AttentionPack's low-rank KV (compress/attentionpack.h), the one KV kind of a
// sequence that is not read as pages. A layer's blocks are stored from a prefill chunk's visual
// rows and from the decode residual window, and attended at decode together with the layer's
// pages in one softmax. KvBackend (kv_backend.h) owns one and hands it the layers that hold
// blocks; the paged formats (f32/f16, int4/int2) stay with KvBackend's mixed-format paged
// attention, which reads them in one pass.
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
#include "engine/core/tensor.h"
#include "engine/llm/decoder_shape.h"
#include "engine/llm/sequence.h"
#include "engine/ops/low_rank.h"

namespace framezip::engine::llm {

class LowRankKv {
 public:
  LowRankKv(const DecoderShape& shape, Device device) : shape_(shape), device_(device) {}

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

  // Decode attention of one sequence whose layer l holds blocks: its pages (plus the unstored
  // row when !stored) dense, the blocks through ops/low_rank.h without rebuilding them, one
  // softmax over both; then the policy sees the blocks' attention (OnLowRankAttention).
  // q [nh·d] post-RoPE, k/v [G·d] this step's rows, out [nh·d], in the decoder's device memory.
  // On a GPU the blocks are attended there (ops::LowRankBlockAttendCuda over the sequence's
  // device_blocks); the pages' share, the merge and the policy's statistics run on the host: an
  // AttentionPack layer's pages hold the text and generated tokens, a small part of its cache.
  Status AttendDecode(int l, Sequence& seq, bool stored, const float* q, const float* k,
                      const float* v, float* out) const;

 private:
  // AttendDecode's blocks on a GPU: each block's share (BlockAttention and its tokens' weights,
  // as ops::LowRankBlockAttend gives them) from the fused kernel over device_q [nh·d] (device
  // memory), copied to the host.
  Status AttendBlocksOnDevice(Sequence& seq, int l, const ops::LowRankAttentionShape& shape,
                              float scale, const float* device_q,
                              std::vector<ops::BlockAttention>& parts,
                              std::vector<std::vector<float>>& weights) const;
  StatusOr<Tensor> Empty(Shape shape) const;

  DecoderShape shape_;
  Device device_;
};

}  // namespace framezip::engine::llm
