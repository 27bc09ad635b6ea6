#include "engine/kv/kv_pools.h"

#include <algorithm>

namespace framezip::engine::kv {

KvPools::KvPools(const PageLayout& base, int64_t max_bytes)
    : base_(base), budget_(std::make_unique<PageBudget>(max_bytes)) {}

StatusOr<std::unique_ptr<KvPools>> KvPools::Create(const PageLayout& base,
                                                   std::span<const KvFormat> formats,
                                                   int64_t max_bytes, Device device) {
  if (max_bytes <= 0 || formats.empty()) {
    return InvalidArgumentError("KV pools: {} formats with a budget of {} bytes", formats.size(),
                                max_bytes);
  }
  std::unique_ptr<KvPools> p(new KvPools(base, max_bytes));
  for (const KvFormat f : formats) {
    if (p->has(f)) continue;
    PageLayout layout = base;
    layout.format = f;
    const int64_t max_pages =
        std::max<int64_t>(1, max_bytes / static_cast<int64_t>(layout.PageBytes()));
    FZ_ASSIGN_OR_RETURN(p->pools_[static_cast<size_t>(f)],
                        PagePool::Create(layout, max_pages, p->budget_.get(),
                                         PoolMemory{.device = device, .preallocate = false}));
  }
  return p;
}

std::vector<KvFormat> KvPools::formats() const {
  std::vector<KvFormat> out;
  for (size_t i = 0; i < pools_.size(); ++i) {
    if (pools_[i]) out.push_back(static_cast<KvFormat>(i));
  }
  return out;
}

int64_t KvPools::pages_in_use() const {
  int64_t n = 0;
  for (const auto& p : pools_) n += p ? p->pages_in_use() : 0;
  return n;
}

size_t KvPools::bytes_in_use() const {
  size_t n = 0;
  for (const auto& p : pools_) n += p ? p->bytes_in_use() : 0;
  return n;
}

size_t KvPools::bytes_reserved() const {
  size_t n = 0;
  for (const auto& p : pools_) n += p ? p->bytes_reserved() : 0;
  return n;
}

}  // namespace framezip::engine::kv
