// Dense prefill attention through FlashInfer's FlashAttention-2 kernel (its single-sequence
// prefill, flashinfer/attention/prefill.cuh, from the headers cmake/FramezipFlashInfer.cmake
// fetches): bf16 q, k, v and output, f32 accumulation, GQA, head sizes 64 and 128, causal or
// bidirectional. The project's tensor-core kernel (attention_mma.cuh) does the same work; which one
// the engine runs is a choice made from measurements (ops/attention.h, AttentionKernel).
//
// FlashInfer's causal mask is bottom-right aligned: query i (of tq) sees keys j <= i + tk - tq, so
// it serves a prefill chunk whose queries are the last tq of the tk keys, not other offsets.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace framezip::engine::cuda {

struct FlashInferPrefillParams {
  const void* q = nullptr;  // bf16 [batch, tq, heads, head_dim]
  const void* k = nullptr;  // bf16 [batch, tk, kv_heads, head_dim]
  const void* v = nullptr;  // bf16 [batch, tk, kv_heads, head_dim]
  void* out = nullptr;      // bf16 [batch, tq, heads, head_dim]; must not alias q, k, v
  int64_t batch = 0;
  int64_t tq = 0;
  int64_t tk = 0;  // causal: tk >= tq
  int heads = 0;
  int kv_heads = 0;  // divides heads
  int head_dim = 0;  // 64 or 128
  float scale = 0;   // already resolved (not 0)
  bool causal = false;
};

// Whether this binary was built with FlashInfer (FRAMEZIP_FLASHINFER), and whether its prefill
// takes this head size.
bool FlashInferBuilt();
bool FlashInferPrefillSupports(int head_dim);

// Never allocates (no split over the keys: a prefill's queries fill the GPU). Returns
// cudaErrorInvalidValue for what FlashInferPrefillSupports refuses, bad head counts, causal with
// tk < tq or pointers not 16-byte aligned, cudaErrorNotSupported in a build without FlashInfer;
// FlashInfer's own refusals (it throws) come back as cudaErrorInvalidConfiguration with its
// message in *error.
cudaError_t LaunchFlashInferPrefill(const FlashInferPrefillParams& params, cudaStream_t stream,
                                    std::string* error);

}  // namespace framezip::engine::cuda
