#include "engine/kv/page_io.h"

#include <vector>

#include "engine/core/half.h"
#include "engine/core/tensor.h"
#include "engine/kv/quant_page.h"
#include "engine/ops/kv_quant_cuda.h"

namespace framezip::engine::kv {

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
