// LocalWindowAttention over a past already gathered to dense f32 rows past_k, past_v [past, G, d]
// on the tensors' device (null when past = 0): the entry SparsePrefillAttention calls after its
// own gather, checked and dispatched as the public op; and its CPU backend (the CUDA one is in
// cuda_backends.h), whose arguments are already checked.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/attention_local.h"

namespace framezip::engine::ops {

Status LocalWindowAttentionOverRows(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const float* past_k, const float* past_v, int64_t past,
                                    std::span<const int32_t> rows, int64_t h0, int64_t nh,
                                    const LocalWindow& params, Tensor& out);

Status LocalWindowAttentionCpu(const Tensor& q, const Tensor& k, const Tensor& v,
                               const float* past_k, const float* past_v, int64_t past,
                               std::span<const int32_t> rows, int64_t h0, int64_t nh,
                               const LocalWindow& params, Tensor& out);

}  // namespace framezip::engine::ops
