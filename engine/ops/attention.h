// Multi-head attention for prefill (causal) and for vision towers (bidirectional), f32.
//
//   out[b, i, h, :] = Σ_j softmax_j(scale · q[b, i, h, :] · k[b, j, g, :] + mask[i, j]) · v[b, j,
//   g, :]
//
// with grouped-query attention: query head h reads KV head g = h / (H / G) (consecutive blocks of
// query heads share a KV head, HF repeat_kv). Causal mask: key j is visible to query i iff
// j <= i + q_offset (query i sits at position q_offset + i of the key sequence; q_offset > 0 when a
// prefill chunk attends to earlier chunks' keys placed first in k/v).
//
// CPU kernel: FlashAttention-style. Work is split over (batch, head, block of queries) on
// ComputePool(); each task walks key blocks with an online softmax (running max and sum), so no
// [Tq, Tk] matrix is materialised and memory stays O(block²) per thread for any length. Blocks
// fully above the causal diagonal are skipped.
//
// Shapes (row-major, contiguous, all f32):
//   q   [B, Tq, H, d]
//   k,v [B, Tk, G, d]      H % G == 0
//   out [B, Tq, H, d]      must not alias q, k or v
// CUDA (attention_cuda.cc): the same tiling and online softmax in f32, head_dim <= 128;
// key_limit stays a host array and is uploaded per call. allow_bf16_tensor_cores selects the
// tensor-core kernel where it applies (see AttentionParams).
// Errors: INVALID_ARGUMENT naming the mismatch (tensors on different devices too); on a CUDA
// device UNIMPLEMENTED in a CPU-only build or for head_dim > 128, UNAVAILABLE without a GPU.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

// Which bf16 tensor-core kernel runs where allow_bf16_tensor_cores applies (GPU only).
//   kAuto        FlashInfer's FlashAttention-2 prefill (kernels/cuda/flashinfer_prefill.cuh) where
//                this build has it and it applies — head_dim exactly 64 or 128, no key_limit, and
//                causal only with q_offset = Tk - Tq (its bottom-right aligned mask) — else the
//                project's own (attention_mma.cuh), which measured 0.24-0.34x of torch SDPA
//                on an H200 (bench/RESULTS.md); `framezip bench gpu` times both side by side.
//   kFramezip    always the project's own kernel (head sizes up to 128, padded).
//   kFlashInfer  FlashInfer, or UNIMPLEMENTED naming why it does not apply (benchmarks compare the
//                two side by side with it).
enum class TensorCoreKernel { kAuto, kFramezip, kFlashInfer };

struct AttentionParams {
  float scale = 0;  // softmax scale; 0 means 1/sqrt(d)
  bool causal = false;
  int64_t q_offset = 0;  // causal only: position of query 0 within the key sequence
  // Prefix mask, overriding `causal`: query i sees keys [0, key_limit[i]) (Tq entries, the same
  // for every batch row; a query that sees no key gets 0). Sparse prefill uses it for rows that
  // attend to a compacted key set by original position.
  const int32_t* key_limit = nullptr;
  // GPU only, opt-in: with head_dim <= 128 (other sizes than 64 and 128 zero-padded to the next
  // of them), no key_limit and at least kTensorCoreMinQueries queries, run on bf16 tensor cores
  // (the kernel tensor_core_kernel picks): q, k, v rounded to bf16, P·V in bf16, f32
  // accumulation, f32 output (FlashInfer's is written in bf16 and widened). For callers whose
  // activations already carry bf16-level error (16-bit weights); it agrees with the f32 kernel to
  // that level. Elsewhere, and on the CPU, the f32 kernel runs.
  bool allow_bf16_tensor_cores = false;
  TensorCoreKernel tensor_core_kernel = TensorCoreKernel::kAuto;
};

// Fewer queries than one tensor-core block (64 rows) leave most of it idle: the f32 kernel then.
inline constexpr int64_t kTensorCoreMinQueries = 64;

Status Attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& params,
                 Tensor& out);

// Every query sees every key (ViT encoders). Same shapes as Attention; scale 0 = 1/sqrt(d).
Status BidirectionalAttention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                              float scale = 0);

// Causal self-attention of a prefill chunk whose queries are the last Tq of the Tk keys
// (q_offset = Tk - Tq). Same shapes as Attention.
Status CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out);

}  // namespace framezip::engine::ops
