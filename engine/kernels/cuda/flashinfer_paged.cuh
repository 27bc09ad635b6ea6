// Attention over dense f16 KV pages through FlashInfer's batch prefill (FlashAttention-2 with a
// page table, flashinfer/attention/prefill.cuh), for decode (one query row per sequence: Qwen2's
// GQA group of 7 has no FlashInfer decode kernel, its prefill kernel serves one row) and for
// chunked prefill (several rows per sequence, causal, the rows last among the keys). f16 q, pages
// and output, f32 accumulation, head sizes 64 and 128.
//
// The pages are framezip's own (kv::PagePool, preallocated on the GPU): page p's keys start at
// keys + p·page_stride elements and its values at values + p·page_stride, token-major
// [page_tokens, kv_heads, head_dim]. A sequence's pages are listed in order; all are full but its
// last, which holds last_page_len tokens (FlashInfer's paged layout, the CSR page table of vLLM).
//
// Two steps, as FlashInfer splits them: a plan from the host's page counts (once per step: how
// the work is cut over the SMs, written to the device workspace with one async copy from the
// page-locked one), then any number of runs that share those counts (every layer of a step).
// Whether the project's paged decode kernel (paged_attention.cuh) or this one serves the engine's
// dense pages is decided by `framezip bench gpu`, which times both over the same pages.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace framezip::engine::cuda {

// FlashInfer's own defaults for its workspaces: enough for any batch this engine runs.
inline constexpr size_t kFlashInferFloatWorkspaceBytes = size_t{128} << 20;
inline constexpr size_t kFlashInferIntWorkspaceBytes = size_t{8} << 20;

// Buffers the caller owns and keeps for as long as plans made with them are run.
struct FlashInferWorkspace {
  void* float_buffer = nullptr;       // device, float_bytes
  void* int_buffer = nullptr;         // device, int_bytes
  void* pinned_int_buffer = nullptr;  // page-locked host, int_bytes
  size_t float_bytes = 0;
  size_t int_bytes = 0;
};

struct FlashInferPagedPlan {
  std::vector<int64_t> info;  // FlashInfer's PrefillPlanInfo, as its ToVector() writes it
  int64_t batch = 0;
  int64_t rows = 0;  // query rows over the batch
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int page_tokens = 0;
};

// Plans the runs for `batch` sequences whose query rows are qo_indptr[b]..qo_indptr[b+1] and whose
// pages are page_indptr[b]..page_indptr[b+1] (host arrays of batch + 1). cudaErrorInvalidValue
// for what FlashInferPagedSupports refuses or counts that do not add up;
// cudaErrorInvalidConfiguration with FlashInfer's message in *error when it refuses (a workspace
// too small); cudaErrorNotSupported in a build without FlashInfer.
cudaError_t PlanFlashInferPaged(const FlashInferWorkspace& workspace, const int32_t* qo_indptr,
                                const int32_t* page_indptr, int64_t batch, int heads, int kv_heads,
                                int head_dim, int page_tokens, cudaStream_t stream,
                                FlashInferPagedPlan* plan, std::string* error);

struct FlashInferPagedRun {
  const void* q = nullptr;  // f16 [rows, heads, head_dim]
  void* out = nullptr;      // f16 [rows, heads, head_dim]
  const void* keys = nullptr;    // f16, page p's keys at keys + p·page_stride
  const void* values = nullptr;  // f16, page p's values at values + p·page_stride
  int64_t page_stride = 0;       // elements
  const int32_t* qo_indptr = nullptr;      // device [batch + 1], as planned
  const int32_t* page_indptr = nullptr;    // device [batch + 1], as planned
  const int32_t* page_indices = nullptr;   // device [page_indptr[batch]]
  const int32_t* last_page_len = nullptr;  // device [batch], 1..page_tokens
  float scale = 0;  // already resolved (not 0)
};

cudaError_t LaunchFlashInferPaged(const FlashInferPagedRun& run, const FlashInferPagedPlan& plan,
                                  const FlashInferWorkspace& workspace, cudaStream_t stream,
                                  std::string* error);

// Head sizes the paged kernels are built for (none in a build without FlashInfer).
bool FlashInferPagedSupports(int head_dim);

}  // namespace framezip::engine::cuda
