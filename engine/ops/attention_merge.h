// Merging shares of one decode row's softmax attention, in flash-decoding's split form: the keys
// of a row are split into disjoint parts, each attended on its own, and the parts are combined by
// their maxima. AttentionPack's decode is the user: the pages' share (PagedDecodeAttention with
// its log-sum-exp) and one share per low-rank block (LowRankBlockAttend's BlockAttention) are
// merged here, on the device that computed them, so no part comes to the host.
//
// For head h, with the base share normalised (base_h, lse_h) and part p unnormalised
// (max_ph, sum_ph, out_ph):
//   M_h = max(lse_h, max_p max_ph)      over shares of non-zero weight (sum > 0, lse > −inf)
//   S_h = e^(lse_h − M_h) + Σ_p e^(max_ph − M_h) · sum_ph
//   out_h = (e^(lse_h − M_h) · base_h + Σ_p e^(max_ph − M_h) · out_ph) / S_h
// A head where no share has weight gets out 0, M −inf, S 0.
//
// The policy's statistics then need each block token's probability in the merged softmax,
// averaged over the heads: AttentionTokenShares.
//
// Shapes: base, out [H, d]; base_lse, total_max, total_sum [H]; part_max, part_sum [P, H]
// (P >= 0); part_out [P, H, d]; all f32 on one device. `out` may be `base` (in place).
// Errors: INVALID_ARGUMENT naming the tensor whose type, shape or device is wrong.
// Thread-safety: no state; calls on disjoint outputs may run concurrently.
// CUDA: one launch each, queued on framezip's stream (engine/kernels/cuda/low_rank.cuh).
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

Status MergeAttentionParts(const Tensor& base, const Tensor& base_lse, const Tensor& part_max,
                           const Tensor& part_sum, const Tensor& part_out, Tensor& out,
                           Tensor& total_max, Tensor& total_sum);

// probs[t] = (1/H) Σ_h e^(part_max_h − M_h) / S_h · weights[h, t], with weights [H, T] one part's
// e^(s_ht − part_max_h) (LowRankBlockAttend's weights), part_max [H] that part's maxima and
// total_max, total_sum [H] the merged M and S above; probs [T]. Heads with S 0 add nothing.
Status AttentionTokenShares(const Tensor& weights, const Tensor& part_max, const Tensor& total_max,
                            const Tensor& total_sum, Tensor& probs);

}  // namespace framezip::engine::ops
