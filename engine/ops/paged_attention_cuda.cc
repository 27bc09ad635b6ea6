// PagedDecodeAttention on the GPU: adapter to engine/kernels/cuda/paged_attention.cuh. The spans'
// pointers (pages, scales) are device pointers; the span list itself is host memory (the op's
// contract), so the descriptors, the split-K work items and the partial results are staged in one
// temporary device buffer per call (freed after the launch: cudaFree waits for the kernels).
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/paged_attention.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {
namespace {

size_t AlignUp(size_t x) { return (x + 255) / 256 * 256; }

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

Status PagedDecodeAttentionCuda(const Tensor& q, const PagedKv& kv, float scale, Tensor& out) {
  constexpr std::string_view kOp = "PagedDecodeAttention";
  const int64_t batch = q.dim(0), heads = q.dim(1), d = q.dim(2);
  FZ_RETURN_IF_ERROR(PagedDecodeSupports(q.device(), d));
  const std::span<const KvSpan> spans = kv.spans;
  std::vector<cuda::PagedSpanDesc> descs(spans.size());
  std::vector<int32_t> span_tokens(spans.size());
  int64_t total_tokens = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const KvSpan& s = spans[i];
    cuda::PagedSpanDesc& e = descs[i];
    e.k = s.k;
    e.v = s.v;
    e.k_scale = s.k_scale;
    e.k_zero = s.k_zero;
    e.v_scale = s.v_scale;
    e.v_zero = s.v_zero;
    e.num_tokens = s.num_tokens;
    e.v_param_stride = s.v_param_stride;
    e.format = static_cast<int32_t>(s.format);  // PagedKvFormat shares kv::KvFormat's values
    span_tokens[i] = s.num_tokens;
    total_tokens += s.num_tokens;
    if (s.num_tokens > 0 && (!Aligned16(s.k) || !Aligned16(s.v))) {
      return InvalidArgumentError("{} on GPU: span {} pages are not 16-byte aligned", kOp, i);
    }
    // The kernels copy a quantised span's key scale/zero with 16-byte cp.async.
    if (s.num_tokens > 0 && kv::IsQuantized(s.format) &&
        (!Aligned16(s.k_scale) || !Aligned16(s.k_zero))) {
      return InvalidArgumentError("{} on GPU: span {} key scale/zero are not 16-byte aligned", kOp,
                                  i);
    }
  }
  ScopedCudaDevice scope(q.device());
  int sm_count = 0;
  FZ_RETURN_IF_ERROR(CudaStatus(
      cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, q.device().index), kOp));
  std::vector<cuda::PagedWorkItem> items;
  std::vector<int32_t> item_offsets;
  cuda::BuildPagedWorkItems(span_tokens.data(), kv.seq_offsets.data(), static_cast<int>(batch),
                            cuda::ChoosePagedTokensPerItem(total_tokens, kv.num_kv_heads,
                                                           static_cast<int>(heads), sm_count),
                            items, item_offsets);

  // One device buffer: descriptors | items | item offsets | partial results.
  const size_t desc_bytes = AlignUp(descs.size() * sizeof(cuda::PagedSpanDesc));
  const size_t item_bytes = AlignUp(items.size() * sizeof(cuda::PagedWorkItem));
  const size_t off_bytes = AlignUp(item_offsets.size() * sizeof(int32_t));
  const size_t ws_bytes =
      cuda::PagedDecodeWorkspaceFloats(static_cast<int32_t>(items.size()), static_cast<int>(heads),
                                       static_cast<int>(d)) *
      sizeof(float);
  const size_t staged = desc_bytes + item_bytes + off_bytes;
  FZ_ASSIGN_OR_RETURN(Tensor scratch, Tensor::Empty({static_cast<int64_t>(staged + ws_bytes)},
                                                    DType::kU8, q.device()));
  std::vector<char> host(staged, 0);
  std::memcpy(host.data(), descs.data(), descs.size() * sizeof(cuda::PagedSpanDesc));
  std::memcpy(host.data() + desc_bytes, items.data(), items.size() * sizeof(cuda::PagedWorkItem));
  std::memcpy(host.data() + desc_bytes + item_bytes, item_offsets.data(),
              item_offsets.size() * sizeof(int32_t));
  char* dev = static_cast<char*>(scratch.raw_data());
  FZ_RETURN_IF_ERROR(CopyBytes(dev, q.device(), host.data(), Device::Cpu(), staged));

  cuda::PagedDecodeLaunch p;
  p.q = static_cast<const float*>(q.raw_data());
  p.out = static_cast<float*>(out.raw_data());
  p.spans = reinterpret_cast<const cuda::PagedSpanDesc*>(dev);
  p.items = reinterpret_cast<const cuda::PagedWorkItem*>(dev + desc_bytes);
  p.item_offsets = reinterpret_cast<const int32_t*>(dev + desc_bytes + item_bytes);
  p.num_items = static_cast<int32_t>(items.size());
  p.workspace = reinterpret_cast<float*>(dev + staged);
  p.batch = static_cast<int>(batch);
  p.heads = static_cast<int>(heads);
  p.kv_heads = kv.num_kv_heads;
  p.head_dim = static_cast<int>(d);
  p.scale = scale > 0 ? scale : 1.0f / std::sqrt(static_cast<float>(d));
  return CudaStatus(cuda::LaunchPagedDecodeAttention(p, nullptr), kOp);
}

}  // namespace framezip::engine::ops
