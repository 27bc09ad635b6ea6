// ZipVL's GPU kernels (docs/methods.md §1.1; CPU versions: engine/compress/probe_scoring.h, top_p.h and
// ops/attention_sparse.h):
//   * probe scores with column reduction: a_j = Σ_{h ∈ group} Σ_{i ∈ P} softmax_causal(q_i·K/√d)_j
//     and ã_j = a_j / c_j (c_j = probes at or after j), never materialising [H, |P|, n];
//   * the adaptive count p (Eq. 6, τ·Σa reached by the sorted prefix, sums in f64) and the
//     important set T = the p largest ã (ties: lower index), ascending, on the device (CUB radix
//     sort, scan and select: no host round trip);
//   * gather of Q[T], K[T], V[T] and the scatter of the compacted attention output back to the
//     original rows (the sparse prefill itself is LaunchAttention, causal over the compacted rows:
//     post-RoPE keys make the compaction exact).
// Launchers never allocate: TopPWorkspaceBytes says how much scratch LaunchTopP needs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace framezip::engine::cuda {

struct ProbeScoresLaunch {
  const float* q = nullptr;  // [n, heads, head_dim] f32 (post-RoPE)
  const float* k = nullptr;  // [n, kv_heads, head_dim] f32
  int64_t n = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;                 // at most 256
  const int32_t* probes = nullptr;  // device [num_probes], sorted, distinct, in [0, n)
  int32_t num_probes = 0;
  bool per_kv_head = false;   // groups = kv_heads (else 1: every head)
  float* a = nullptr;         // out [groups, n]
  float* a_norm = nullptr;    // out [groups, n]
  int32_t* counts = nullptr;  // out [n]
};

cudaError_t LaunchProbeScores(const ProbeScoresLaunch& params, cudaStream_t stream);

// Top-p over one row of n scores: count = AdaptiveCount(a, tau) and indices[0, count) = the count
// largest a_norm, ascending (indices past count are unspecified). count and indices are device.
size_t TopPWorkspaceBytes(int64_t n);

struct TopPLaunch {
  const float* a = nullptr;       // [n] raw scores (Eq. 6)
  const float* a_norm = nullptr;  // [n] normalised scores (Eq. 8)
  int64_t n = 0;                  // at most 2^31 - 1
  double tau = 0.975;
  void* workspace = nullptr;   // TopPWorkspaceBytes(n) bytes, 256-byte aligned
  int32_t* count = nullptr;    // out [1]
  int32_t* indices = nullptr;  // out [n]
};

cudaError_t LaunchTopP(const TopPLaunch& params, cudaStream_t stream);

// The general row move: for i < rows and c < width,
//   dst[drow(i) · dst_stride + dst_col0 + c] = src[srow(i) · src_stride + src_col0 + c]
// with srow(i) = src_rows[i] (device) or i when src_rows is null, and drow likewise. A column
// range is a head range of a [tokens, heads · d] matrix: per-KV-head selection moves one group's
// heads. Distinct destination rows are the caller's duty.
struct RowSliceCopy {
  const float* src = nullptr;
  int64_t src_stride = 0;
  int64_t src_col0 = 0;
  const int32_t* src_rows = nullptr;
  float* dst = nullptr;
  int64_t dst_stride = 0;
  int64_t dst_col0 = 0;
  const int32_t* dst_rows = nullptr;
  int64_t rows = 0;
  int64_t width = 0;
};

cudaError_t LaunchCopyRowSlices(const RowSliceCopy& params, cudaStream_t stream);

// Whole rows of `width` floats: dst[i, :] = src[idx[i], :] for i < m.
cudaError_t LaunchGatherRows(const float* src, int64_t width, const int32_t* idx, int64_t m,
                             float* dst, cudaStream_t stream);
// dst[idx[i], :] = src[i, :] for i < m; other rows of dst untouched.
cudaError_t LaunchScatterRows(const float* src, int64_t width, const int32_t* idx, int64_t m,
                              float* dst, cudaStream_t stream);

}  // namespace framezip::engine::cuda
