// PagedDecodeAttention on the GPU: adapter to engine/kernels/cuda/paged_attention.cuh. The spans'
// pointers (pages, scales) are device pointers. The kernel reads its span descriptors and split-K
// work items from device memory: a step plan serialises them for every layer into its one upload
// (PlanPagedDecodeCuda, PagedDecodeAttentionPlannedCuda); the unplanned op (the eager steps:
// AttentionPack's, Dynamic-LLaVA's) builds its own and sends them from page-locked memory of a
// per-device StagingPool, without waiting for the device.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/core/staging_pool.h"
#include "engine/kernels/cuda/paged_attention.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {
namespace {

size_t AlignUp(size_t x) { return (x + 255) / 256 * 256; }

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Streaming multiprocessors of `device`, asked once per device (the work split depends on it).
int SmCountOf(Device device) {
  static std::mutex mu;
  static std::map<int, int> counts;
  std::lock_guard<std::mutex> lock(mu);
  auto it = counts.find(device.index);
  if (it != counts.end()) return it->second;
  int sm_count = 0;
  if (cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device.index) !=
      cudaSuccess) {
    cudaGetLastError();
    sm_count = 1;  // a split for one SM is correct, only slower; the launch reports the fault
  }
  counts.emplace(device.index, sm_count);
  return sm_count;
}

}  // namespace

// The kernel's span descriptors, split-K work items and item offsets for kv, appended to `arena`
// (each part 256-byte aligned); plan gets their offset, the item count and the workspace size.
Status PlanPagedDecodeCuda(Device device, const PagedKv& kv, int64_t heads,
                           std::vector<std::byte>& arena, PagedDecodePlan& plan) {
  constexpr std::string_view kOp = "PagedDecodeAttention";
  const int64_t d = kv.head_dim;
  FZ_RETURN_IF_ERROR(PagedDecodeSupports(device, d));
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
  std::vector<cuda::PagedWorkItem> items;
  std::vector<int32_t> item_offsets;
  cuda::BuildPagedWorkItems(
      span_tokens.data(), kv.seq_offsets.data(), static_cast<int>(kv.batch()),
      cuda::ChoosePagedTokensPerItem(total_tokens, kv.num_kv_heads, static_cast<int>(heads),
                                     SmCountOf(device)),
      items, item_offsets);
  const size_t desc_bytes = AlignUp(descs.size() * sizeof(cuda::PagedSpanDesc));
  const size_t item_bytes = AlignUp(items.size() * sizeof(cuda::PagedWorkItem));
  const size_t off_bytes = AlignUp(item_offsets.size() * sizeof(int32_t));
  plan.offset = AlignUp(arena.size());
  arena.resize(plan.offset + desc_bytes + item_bytes + off_bytes);
  std::byte* at = arena.data() + plan.offset;
  std::memcpy(at, descs.data(), descs.size() * sizeof(cuda::PagedSpanDesc));
  std::memcpy(at + desc_bytes, items.data(), items.size() * sizeof(cuda::PagedWorkItem));
  std::memcpy(at + desc_bytes + item_bytes, item_offsets.data(),
              item_offsets.size() * sizeof(int32_t));
  plan.num_items = static_cast<int32_t>(items.size());
  plan.workspace_floats = cuda::PagedDecodeWorkspaceFloats(plan.num_items, static_cast<int>(heads),
                                                           static_cast<int>(d));
  return absl::OkStatus();
}

Status PagedDecodeAttentionPlannedCuda(const Tensor& q, const PagedDecodePlan& plan,
                                       const std::byte* arena, float* workspace, float scale,
                                       Tensor& out, float* lse) {
  const int64_t d = plan.head_dim;
  const size_t desc_bytes =
      AlignUp(static_cast<size_t>(plan.num_spans) * sizeof(cuda::PagedSpanDesc));
  const size_t item_bytes =
      AlignUp(static_cast<size_t>(plan.num_items) * sizeof(cuda::PagedWorkItem));
  const std::byte* at = arena + plan.offset;
  ScopedCudaDevice scope(q.device());
  cuda::PagedDecodeLaunch p;
  p.q = static_cast<const float*>(q.raw_data());
  p.out = static_cast<float*>(out.raw_data());
  p.lse = lse;
  p.spans = reinterpret_cast<const cuda::PagedSpanDesc*>(at);
  p.items = reinterpret_cast<const cuda::PagedWorkItem*>(at + desc_bytes);
  p.item_offsets = reinterpret_cast<const int32_t*>(at + desc_bytes + item_bytes);
  p.num_items = plan.num_items;
  p.workspace = workspace;
  p.batch = static_cast<int>(plan.batch);
  p.heads = static_cast<int>(plan.heads);
  p.kv_heads = plan.num_kv_heads;
  p.head_dim = static_cast<int>(d);
  p.scale = scale > 0 ? scale : 1.0f / std::sqrt(static_cast<float>(d));
  return LaunchStatus(cuda::LaunchPagedDecodeAttention(p, CurrentFramezipStream()),
                      "PagedDecodeAttention", 2);
}

namespace {

// The unplanned op's upload buffers, one pool per device for the process (never destroyed: no
// page-locked memory is released during the process's exit, after the CUDA runtime may be gone).
StagingPool& DescriptorStaging(Device device) {
  static std::mutex mu;
  static auto& pools = *new std::map<int, std::unique_ptr<StagingPool>>();
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<StagingPool>& pool = pools[device.index];
  if (pool == nullptr) pool = std::make_unique<StagingPool>(device);
  return *pool;
}

}  // namespace

// Unplanned: the same plan built into a host arena, sent from page-locked memory in one
// asynchronous copy into a device buffer that also holds the workspace (the caching allocator
// frees it after the launch, in stream order).
Status PagedDecodeAttentionCuda(const Tensor& q, const PagedKv& kv, float scale, Tensor& out,
                                float* lse) {
  std::vector<std::byte> host;
  PagedDecodePlan plan;
  plan.batch = q.dim(0);
  plan.heads = q.dim(1);
  plan.num_spans = static_cast<int32_t>(kv.spans.size());
  plan.num_kv_heads = kv.num_kv_heads;
  plan.head_dim = kv.head_dim;
  FZ_RETURN_IF_ERROR(PlanPagedDecodeCuda(q.device(), kv, q.dim(1), host, plan));
  const size_t staged = AlignUp(host.size());
  FZ_ASSIGN_OR_RETURN(
      Tensor scratch,
      Tensor::Empty({static_cast<int64_t>(staged + plan.workspace_floats * sizeof(float))},
                    DType::kU8, q.device()));
  auto* dev = static_cast<std::byte*>(scratch.raw_data());
  StagingPool& pool = DescriptorStaging(q.device());
  FZ_ASSIGN_OR_RETURN(StagingPool::Entry entry, pool.Take(host.size()));
  std::memcpy(entry.memory.get(), host.data(), host.size());
  const Status sent = UploadAsync(dev, q.device(), entry.memory.get(), host.size());
  pool.GiveAfterQueuedWork(std::move(entry));  // reused once the copy has read it
  FZ_RETURN_IF_ERROR(sent);
  return PagedDecodeAttentionPlannedCuda(q, plan, dev, reinterpret_cast<float*>(dev + staged),
                                         scale, out, lse);
}

}  // namespace framezip::engine::ops
