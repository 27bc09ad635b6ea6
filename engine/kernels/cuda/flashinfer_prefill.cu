// FlashInfer's single-sequence prefill (flashinfer_prefill.cuh), instantiated for bf16 at head
// sizes 64 and 128, causal and bidirectional, without positional encoding (q and k arrive
// rotated), soft cap, sliding window or custom mask. Params is the structure FlashInfer's kernels
// read (its members are what prefill.cuh and DefaultAttention access).
#include <cuda_bf16.h>

#include <exception>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/variants.cuh>

#include "engine/kernels/cuda/flashinfer_prefill.cuh"

namespace framezip::engine::cuda {
namespace {

using Bf16 = __nv_bfloat16;

struct SinglePrefillParams {
  using DTypeQ = Bf16;
  using DTypeKV = Bf16;
  using DTypeO = Bf16;
  using IdType = int32_t;
  DTypeQ* q = nullptr;
  DTypeKV* k = nullptr;
  DTypeKV* v = nullptr;
  DTypeO* o = nullptr;
  float* lse = nullptr;
  flashinfer::uint_fastdiv group_size;
  uint8_t* maybe_custom_mask = nullptr;
  float* maybe_alibi_slopes = nullptr;
  float logits_soft_cap = 0;
  float sm_scale = 0;
  float rope_rcp_scale = 1;
  float rope_rcp_theta = 1;
  uint32_t qo_len = 0, kv_len = 0, num_qo_heads = 0, num_kv_heads = 0;
  uint32_t q_stride_n = 0, q_stride_h = 0, k_stride_n = 0, k_stride_h = 0, v_stride_n = 0,
           v_stride_h = 0;
  uint32_t head_dim = 0;
  int32_t window_left = -1;
  bool partition_kv = false;

  __host__ __device__ __forceinline__ uint32_t get_qo_len(uint32_t) const { return qo_len; }
  __host__ __device__ __forceinline__ uint32_t get_kv_len(uint32_t) const { return kv_len; }
};

using Variant = flashinfer::DefaultAttention</*use_custom_mask=*/false, /*use_sliding_window=*/false,
                                             /*use_logits_soft_cap=*/false, /*use_alibi=*/false>;

template <uint32_t kHeadDim, flashinfer::MaskMode kMask>
cudaError_t Run(SinglePrefillParams& p, cudaStream_t stream) {
  return flashinfer::SinglePrefillWithKVCacheDispatched<
      kHeadDim, kHeadDim, flashinfer::PosEncodingMode::kNone, /*USE_FP16_QK_REDUCTION=*/false,
      kMask, /*USE_TOKEN_HEAD_SF=*/false, Variant, SinglePrefillParams>(p, /*tmp=*/nullptr,
                                                                        stream);
}

cudaError_t RunOne(SinglePrefillParams& p, int head_dim, bool causal, cudaStream_t stream) {
  using flashinfer::MaskMode;
  if (head_dim == 64) {
    return causal ? Run<64, MaskMode::kCausal>(p, stream) : Run<64, MaskMode::kNone>(p, stream);
  }
  return causal ? Run<128, MaskMode::kCausal>(p, stream) : Run<128, MaskMode::kNone>(p, stream);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool FlashInferBuilt() { return true; }

bool FlashInferPrefillSupports(int head_dim) { return head_dim == 64 || head_dim == 128; }

cudaError_t LaunchFlashInferPrefill(const FlashInferPrefillParams& params, cudaStream_t stream,
                                    std::string* error) {
  const FlashInferPrefillParams& a = params;
  if (!FlashInferPrefillSupports(a.head_dim) || a.heads <= 0 || a.kv_heads <= 0 ||
      a.heads % a.kv_heads != 0 || a.batch < 0 || a.tq < 0 || a.tk < 0 ||
      (a.causal && a.tk < a.tq) || a.tq > UINT32_MAX || a.tk > UINT32_MAX || !Aligned16(a.q) ||
      !Aligned16(a.k) || !Aligned16(a.v) || !Aligned16(a.out)) {
    return cudaErrorInvalidValue;
  }
  if (a.batch == 0 || a.tq == 0) return cudaSuccess;
  if (a.tk == 0) return cudaErrorInvalidValue;  // a query with no key has no softmax
  const int64_t d = a.head_dim;
  const int64_t q_seq = a.tq * a.heads * d, kv_seq = a.tk * a.kv_heads * d;
  SinglePrefillParams p;
  p.group_size = flashinfer::uint_fastdiv(static_cast<uint32_t>(a.heads / a.kv_heads));
  p.sm_scale = a.scale;
  p.qo_len = static_cast<uint32_t>(a.tq);
  p.kv_len = static_cast<uint32_t>(a.tk);
  p.num_qo_heads = static_cast<uint32_t>(a.heads);
  p.num_kv_heads = static_cast<uint32_t>(a.kv_heads);
  p.q_stride_n = static_cast<uint32_t>(a.heads * d);
  p.q_stride_h = static_cast<uint32_t>(d);
  p.k_stride_n = p.v_stride_n = static_cast<uint32_t>(a.kv_heads * d);
  p.k_stride_h = p.v_stride_h = static_cast<uint32_t>(d);
  p.head_dim = static_cast<uint32_t>(d);
  try {
    for (int64_t b = 0; b < a.batch; ++b) {
      p.q = const_cast<Bf16*>(static_cast<const Bf16*>(a.q) + b * q_seq);
      p.k = const_cast<Bf16*>(static_cast<const Bf16*>(a.k) + b * kv_seq);
      p.v = const_cast<Bf16*>(static_cast<const Bf16*>(a.v) + b * kv_seq);
      p.o = static_cast<Bf16*>(a.out) + b * q_seq;
      p.partition_kv = false;
      if (const cudaError_t e = RunOne(p, a.head_dim, a.causal, stream); e != cudaSuccess) {
        return e;
      }
    }
  } catch (const std::exception& e) {
    if (error != nullptr) *error = e.what();
    return cudaErrorInvalidConfiguration;
  }
  return cudaSuccess;
}

}  // namespace framezip::engine::cuda
