// KvPools: one PagePool per KV page format an engine uses (e.g. f16 for full-precision tokens plus
// int4/int2 for compressed ones), all of one model's page shape (page_tokens, G, d), drawing from
// ONE shared byte budget: pages in use across every pool never exceed max_bytes. (Memory is
// reserved lazily per pool, up to max_bytes each; a pool never gives reserved chunks back, so
// after heavy use of several formats the reserved total can exceed max_bytes — the budget bounds
// what sequences hold, not the allocator's high-water mark.)
//
// Sequences keep raw pointers to the pools: KvPools must outlive every SequenceKv built on it.
// Thread-safety: as PagePool (allocation and counters are thread-safe).
#pragma once

#include <array>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/kv/page_pool.h"

namespace framezip::engine::kv {

class KvPools {
 public:
  // Pools for `formats` (duplicates ignored; base.format is ignored) sharing `max_bytes`, their
  // pages on `device` (reserved in chunks as pages are taken: on a GPU from the caching
  // allocator). INVALID_ARGUMENT as PagePool::Create (e.g. int4 with head_dim % 32 != 0).
  static StatusOr<std::unique_ptr<KvPools>> Create(const PageLayout& base,
                                                   std::span<const KvFormat> formats,
                                                   int64_t max_bytes,
                                                   Device device = Device::Cpu());

  // The pool of `format`, or nullptr when this set has none.
  PagePool* pool(KvFormat format) const { return pools_[static_cast<size_t>(format)].get(); }
  bool has(KvFormat format) const { return pool(format) != nullptr; }
  std::vector<KvFormat> formats() const;
  const PageLayout& base_layout() const { return base_; }

  int64_t max_bytes() const { return budget_->max_bytes(); }
  // Bytes taken from the budget: pages in use and low-rank blocks.
  int64_t used_bytes() const { return budget_->used_bytes(); }
  int64_t pages_in_use() const;
  size_t bytes_in_use() const;
  size_t bytes_reserved() const;

 private:
  KvPools(const PageLayout& base, int64_t max_bytes);
  PageLayout base_;
  std::unique_ptr<PageBudget> budget_;
  std::array<std::unique_ptr<PagePool>, kNumKvFormats> pools_;
};

}  // namespace framezip::engine::kv
