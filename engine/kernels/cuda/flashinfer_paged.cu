// FlashInfer's batch prefill over a page table (flashinfer_paged.cuh), instantiated for f16 q,
// pages and output at head sizes 64 and 128 with the bottom-right causal mask (decode rows and
// prefill chunks alike), no positional encoding (q and k arrive rotated), soft cap, sliding window
// or custom mask. PagedParams is the structure FlashInfer's kernels read (its members are what
// prefill.cuh and DefaultAttention access).
#include <cuda_fp16.h>

#include <exception>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/page.cuh>

#include "engine/kernels/cuda/flashinfer_paged.cuh"

namespace framezip::engine::cuda {
namespace {

using Half = __half;

struct PagedParams {
  using DTypeQ = Half;
  using DTypeKV = Half;
  using DTypeO = Half;
  using IdType = int32_t;
  DTypeQ* q = nullptr;
  flashinfer::paged_kv_t<DTypeKV, IdType> paged_kv;
  IdType* q_indptr = nullptr;
  DTypeO* o = nullptr;
  float* lse = nullptr;
  flashinfer::uint_fastdiv group_size;
  uint8_t* maybe_custom_mask = nullptr;
  float* maybe_alibi_slopes = nullptr;
  uint8_t* maybe_k_cache_sf = nullptr;
  uint8_t* maybe_v_cache_sf = nullptr;
  float logits_soft_cap = 0;
  float sm_scale = 0;
  float rope_rcp_scale = 1;
  float rope_rcp_theta = 1;
  uint32_t num_qo_heads = 0;
  IdType q_stride_n = 0;
  IdType q_stride_h = 0;
  uint32_t k_sf_stride_page = 0, k_sf_stride_n = 0, k_sf_stride_h = 0;
  uint32_t v_sf_stride_page = 0, v_sf_stride_n = 0, v_sf_stride_h = 0;
  int32_t window_left = -1;
  IdType* request_indices = nullptr;
  IdType* qo_tile_indices = nullptr;
  IdType* kv_tile_indices = nullptr;
  IdType* merge_indptr = nullptr;
  IdType* o_indptr = nullptr;
  bool* block_valid_mask = nullptr;
  IdType* kv_chunk_size_ptr = nullptr;
  uint32_t max_total_num_rows = 0;
  uint32_t* total_num_rows = nullptr;
  uint32_t padded_batch_size = 0;
  bool partition_kv = false;

  __host__ __device__ __forceinline__ uint32_t get_qo_len(uint32_t batch_idx) const {
    return q_indptr[batch_idx + 1] - q_indptr[batch_idx];
  }
  __host__ __device__ __forceinline__ uint32_t get_kv_len(uint32_t batch_idx) const {
    return paged_kv.get_length(batch_idx);
  }
};

using Variant = flashinfer::DefaultAttention</*use_custom_mask=*/false, /*use_sliding_window=*/false,
                                             /*use_logits_soft_cap=*/false, /*use_alibi=*/false>;

template <uint32_t kHeadDim>
cudaError_t Dispatch(PagedParams& p, uint32_t cta_tile_q, Half* tmp_v, float* tmp_s,
                     cudaStream_t stream) {
  cudaError_t status = cudaErrorInvalidValue;
  DISPATCH_CTA_TILE_Q(cta_tile_q, CTA_TILE_Q, {
    status = flashinfer::BatchPrefillWithPagedKVCacheDispatched<
        /*SAME_KV_STRIDES=*/true, CTA_TILE_Q, kHeadDim, kHeadDim,
        flashinfer::PosEncodingMode::kNone, /*USE_FP16_QK_REDUCTION=*/false,
        flashinfer::MaskMode::kCausal, /*USE_TOKEN_HEAD_SF=*/false, Variant, PagedParams>(
        p, tmp_v, tmp_s, /*enable_pdl=*/false, stream);
  });
  return status;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool FlashInferPagedSupports(int head_dim) { return head_dim == 64 || head_dim == 128; }

cudaError_t PlanFlashInferPaged(const FlashInferWorkspace& workspace, const int32_t* qo_indptr,
                                const int32_t* page_indptr, int64_t batch, int heads, int kv_heads,
                                int head_dim, int page_tokens, cudaStream_t stream,
                                FlashInferPagedPlan* plan, std::string* error) {
  if (!FlashInferPagedSupports(head_dim) || heads <= 0 || kv_heads <= 0 ||
      heads % kv_heads != 0 || batch <= 0 || batch > INT32_MAX || page_tokens <= 0 ||
      qo_indptr == nullptr || page_indptr == nullptr || plan == nullptr ||
      qo_indptr[0] != 0 || page_indptr[0] != 0) {
    return cudaErrorInvalidValue;
  }
  for (int64_t b = 0; b < batch; ++b) {
    // Every sequence has rows to attend for and at least one page holding its keys.
    if (qo_indptr[b + 1] <= qo_indptr[b] || page_indptr[b + 1] <= page_indptr[b]) {
      return cudaErrorInvalidValue;
    }
  }
  flashinfer::PrefillPlanInfo info;
  try {
    const cudaError_t e = flashinfer::PrefillPlan<int32_t>(
        workspace.float_buffer, workspace.float_bytes, workspace.int_buffer,
        workspace.pinned_int_buffer, workspace.int_bytes, info,
        const_cast<int32_t*>(qo_indptr), const_cast<int32_t*>(page_indptr),
        static_cast<uint32_t>(qo_indptr[batch]), static_cast<uint32_t>(batch),
        static_cast<uint32_t>(heads), static_cast<uint32_t>(kv_heads),
        static_cast<uint32_t>(head_dim), static_cast<uint32_t>(head_dim),
        static_cast<uint32_t>(page_tokens), /*enable_cuda_graph=*/false,
        /*sizeof_dtype_o=*/sizeof(Half), /*window_left=*/-1, /*fixed_split_size=*/-1,
        /*disable_split_kv=*/false, /*num_colocated_ctas=*/0, /*uniform_q_len=*/0,
        /*fixed_uniform_q_len=*/false, stream, /*kv_dtype_bytes=*/sizeof(Half));
    if (e != cudaSuccess) return e;
  } catch (const std::exception& e) {
    if (error != nullptr) *error = e.what();
    return cudaErrorInvalidConfiguration;
  }
  plan->info = info.ToVector();
  plan->batch = batch;
  plan->rows = qo_indptr[batch];
  plan->heads = heads;
  plan->kv_heads = kv_heads;
  plan->head_dim = head_dim;
  plan->page_tokens = page_tokens;
  return cudaSuccess;
}

cudaError_t LaunchFlashInferPaged(const FlashInferPagedRun& run, const FlashInferPagedPlan& plan,
                                  const FlashInferWorkspace& workspace, cudaStream_t stream,
                                  std::string* error) {
  if (plan.info.empty() || !FlashInferPagedSupports(plan.head_dim) || !Aligned16(run.q) ||
      !Aligned16(run.out) || !Aligned16(run.keys) || !Aligned16(run.values) ||
      run.page_stride <= 0 || run.page_stride % 8 != 0 || run.qo_indptr == nullptr ||
      run.page_indptr == nullptr || run.page_indices == nullptr || run.last_page_len == nullptr) {
    return cudaErrorInvalidValue;
  }
  flashinfer::PrefillPlanInfo info;
  info.FromVector(plan.info);
  const int64_t d = plan.head_dim;
  // Strides in elements: [page, token, head] (the NHD layout) for keys and values alike.
  const int64_t strides[3] = {run.page_stride, int64_t{plan.kv_heads} * d, d};
  PagedParams p;
  p.q = const_cast<Half*>(static_cast<const Half*>(run.q));
  p.paged_kv = flashinfer::paged_kv_t<Half, int32_t>(
      static_cast<uint32_t>(plan.kv_heads), static_cast<uint32_t>(plan.page_tokens),
      static_cast<uint32_t>(d), static_cast<uint32_t>(plan.batch), flashinfer::QKVLayout::kNHD,
      const_cast<Half*>(static_cast<const Half*>(run.keys)),
      const_cast<Half*>(static_cast<const Half*>(run.values)), strides,
      const_cast<int32_t*>(run.page_indices), const_cast<int32_t*>(run.page_indptr),
      const_cast<int32_t*>(run.last_page_len));
  p.q_indptr = const_cast<int32_t*>(run.qo_indptr);
  p.o = static_cast<Half*>(run.out);
  p.group_size = flashinfer::uint_fastdiv(static_cast<uint32_t>(plan.heads / plan.kv_heads));
  p.sm_scale = run.scale;
  p.num_qo_heads = static_cast<uint32_t>(plan.heads);
  p.q_stride_n = static_cast<int32_t>(plan.heads * d);
  p.q_stride_h = static_cast<int32_t>(d);
  char* int_base = static_cast<char*>(workspace.int_buffer);
  char* float_base = static_cast<char*>(workspace.float_buffer);
  auto int_at = [&](int64_t offset) { return reinterpret_cast<int32_t*>(int_base + offset); };
  p.request_indices = int_at(info.request_indices_offset);
  p.qo_tile_indices = int_at(info.qo_tile_indices_offset);
  p.kv_tile_indices = int_at(info.kv_tile_indices_offset);
  p.o_indptr = int_at(info.o_indptr_offset);
  p.kv_chunk_size_ptr = int_at(info.kv_chunk_size_ptr_offset);
  Half* tmp_v = nullptr;
  float* tmp_s = nullptr;
  if (info.split_kv) {
    p.merge_indptr = int_at(info.merge_indptr_offset);
    tmp_v = reinterpret_cast<Half*>(float_base + info.v_offset);
    tmp_s = reinterpret_cast<float*>(float_base + info.s_offset);
  }
  p.padded_batch_size = static_cast<uint32_t>(info.padded_batch_size);
  p.max_total_num_rows = static_cast<uint32_t>(info.total_num_rows);
  const uint32_t cta_tile_q = static_cast<uint32_t>(info.cta_tile_q);
  try {
    return plan.head_dim == 64 ? Dispatch<64>(p, cta_tile_q, tmp_v, tmp_s, stream)
                               : Dispatch<128>(p, cta_tile_q, tmp_v, tmp_s, stream);
  } catch (const std::exception& e) {
    if (error != nullptr) *error = e.what();
    return cudaErrorInvalidConfiguration;
  }
}

}  // namespace framezip::engine::cuda
