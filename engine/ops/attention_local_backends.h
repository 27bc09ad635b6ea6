// CPU entry point of ops/attention_local.cc (the CUDA one is in cuda_backends.h); arguments are
// already checked.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/attention_local.h"

namespace framezip::engine::ops {

Status LocalWindowAttentionCpu(const Tensor& q, const Tensor& k, const Tensor& v,
                               const float* past_k, const float* past_v, int64_t past,
                               std::span<const int32_t> rows, int64_t h0, int64_t nh,
                               const LocalWindow& params, Tensor& out);

}  // namespace framezip::engine::ops
