#include "engine/kv/page_io.h"

#include <cstring>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/core/half.h"
#include "engine/core/tensor.h"
#include "engine/kv/quant_page.h"
#include "engine/ops/cast.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/kv_quant_cuda.h"
#include "engine/ops/row_slices.h"

namespace framezip::engine::kv {
namespace {

// Writes `count` f32 values as a dense pool's element type, on the host.
void StoreHost(const float* src, int64_t count, DType dtype, void* dst) {
  if (dtype == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
    return;
  }
  ops::cpu::ToF16(src, count, static_cast<Float16*>(dst));
}

}  // namespace

Status WriteDenseSlots(const PagePool& pool, PageId id, int64_t slot0, const float* k,
                       const float* v, int64_t n) {
  const int64_t row = pool.layout().channels();
  const size_t offset = static_cast<size_t>(slot0 * row) * DTypeSize(pool.dtype());
  char* keys = static_cast<char*>(pool.Keys(id)) + offset;
  char* values = static_cast<char*>(pool.Values(id)) + offset;
  if (pool.device().is_cpu()) {
    StoreHost(k, n * row, pool.dtype(), keys);
    StoreHost(v, n * row, pool.dtype(), values);
    return absl::OkStatus();
  }
  FZ_RETURN_IF_ERROR(
      ops::ConvertElements(pool.device(), k, DType::kF32, keys, pool.dtype(), n * row));
  return ops::ConvertElements(pool.device(), v, DType::kF32, values, pool.dtype(), n * row);
}

Status WriteQuantPages(const PagePool& pool, std::span<const PageId> ids, const float* k,
                       const float* v, int64_t n) {
  const PageLayout& layout = pool.layout();
  const int64_t p = layout.page_tokens, row = layout.channels();
  if (pool.device().is_cpu()) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t t0 = static_cast<int64_t>(i) * p;
      WriteQuantPage(layout, k + t0 * row, v + t0 * row, std::min(p, n - t0), pool.Keys(ids[i]));
    }
    return absl::OkStatus();
  }
  std::vector<void*> pages;
  pages.reserve(ids.size());
  for (const PageId id : ids) pages.push_back(pool.Keys(id));
  // [n, G, d]: the shape the quantiser checks (its channels are G·d).
  const Shape shape = {n, layout.num_kv_heads, layout.head_dim};
  const Tensor kt = Tensor::View(const_cast<float*>(k), shape, DType::kF32, pool.device());
  const Tensor vt = Tensor::View(const_cast<float*>(v), shape, DType::kF32, pool.device());
  const int bits = layout.format == KvFormat::kInt2 ? 2 : 4;
  return ops::QuantizeKvPagesCuda(kt, vt, p, bits, pages);
}

ops::KvSpan PageSpan(const PagePool& pool, PageId id, int32_t n) {
  if (IsQuantized(pool.format())) return QuantPageSpan(pool.layout(), pool.Keys(id), n);
  ops::KvSpan s;
  s.k = pool.Keys(id);
  s.v = pool.Values(id);
  s.num_tokens = n;
  s.format = pool.format();
  return s;
}

Status ReadPageSlots(const PagePool& pool, PageId id, int64_t n, float* k, float* v) {
  const ops::KvSpan span = PageSpan(pool, id, static_cast<int32_t>(n));
  const int32_t offsets[] = {0, 1};
  const ops::PagedKv one{{&span, 1}, offsets, pool.layout().num_kv_heads, pool.layout().head_dim};
  return ops::GatherPagedKv(one, 0, pool.device(), k, v);
}

}  // namespace framezip::engine::kv
