// ZipVL on the GPU (engine/kernels/cuda/zipvl.cuh): probe scoring, the adaptive top-p split and
// the sparse prefill over the important rows, each matching its CPU version
// (compress/probe_scoring.h, compress/top_p.h, ops/attention_sparse.h with RestRows::kZero).
// Head-shared selection only for the sparse prefill (one important list for every head).
// All tensors on one GPU; INVALID_ARGUMENT for bad shapes; UNIMPLEMENTED without CUDA.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

// q [n, H, d], k [n, G, d] f32; probes (host) sorted, distinct, in [0, n). Writes a, a_norm
// [groups, n] f32 and counts [n] i32 (groups = G with per_kv_head, else 1).
Status ProbeScoresCuda(const Tensor& q, const Tensor& k, std::span<const int32_t> probes,
                       bool per_kv_head, Tensor& a, Tensor& a_norm, Tensor& counts);

// a, a_norm [n] f32; indices [n] i32. Returns p = AdaptiveCount(a, tau) (one device-to-host copy)
// with indices[0, p) = the p largest a_norm (ties: lower index), ascending.
StatusOr<int64_t> TopPCuda(const Tensor& a, const Tensor& a_norm, double tau, Tensor& indices);

// Causal attention of the rows indices[0, p) (ascending) among themselves, written back to those
// rows of out [T, H, d]; every other row of out is 0. q [T, H, d], k, v [T, G, d] f32.
Status SparsePrefillCuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& indices,
                         int64_t p, Tensor& out);

// The whole step: head-shared probe scores, top-p at tau, sparse prefill. Returns p.
StatusOr<int64_t> ZipvlSparsePrefillCuda(const Tensor& q, const Tensor& k, const Tensor& v,
                                         std::span<const int32_t> probes, double tau, Tensor& out);

}  // namespace framezip::engine::ops
