// The argument checks LowRankBlockAttend shares between its CPU op (low_rank_attend_cpu.cc) and its
// GPU op (low_rank_cuda.cc): head counts, head size against the RoPE, and the four factor views'
// shapes against each other. What differs stays with each op: the CPU op also reads every position
// and rank; on the GPU those live in device memory and the caller vouches for them.
#pragma once

#include <string_view>

#include "common/status.h"
#include "engine/ops/low_rank.h"

namespace framezip::engine::ops {

// INVALID_ARGUMENT naming `op` and the first bad argument: num_heads not a positive multiple of
// num_kv_heads, head_dim odd or unequal to rope.head_dim, a rank below 1, a view whose shape does
// not match [T, R_k] / [R_k, G·d] / [T, R_v] / [R_v, G·d] (T = positions.size()) or whose data
// pointers for its format are null, value_ranks.size() != T.
Status CheckLowRankBlockShape(std::string_view op, const LowRankBlockView& block,
                              const LowRankAttentionShape& shape, const RopeParams& rope);

}  // namespace framezip::engine::ops
