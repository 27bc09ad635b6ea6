// PagePool: fixed-size KV pages of one format, shared by every sequence of an engine.
//
// A page holds `page_tokens` token slots of ONE layer, keys and values:
//   K [page_tokens, G, d] then V [page_tokens, G, d], in the pool's format (f32 or f16),
// token-major so one token's write is contiguous across heads. Pages are handed out by id and
// returned with Free(); memory is reserved lazily in chunks up to `max_pages`, so an idle engine
// stays small and a full one answers RESOURCE_EXHAUSTED instead of growing without bound.
//
// Thread-safety: Allocate/Free/counters are thread-safe. A page's bytes belong to whoever holds
// its id (one SequenceKv); pointers stay valid until the pool is destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "engine/core/buffer.h"
#include "engine/kv/kv_format.h"

namespace framezip::engine::kv {

using PageId = int32_t;

struct PageLayout {
  int page_tokens = 32;  // token slots per page (a multiple of the future quantisation group)
  int num_kv_heads = 0;  // G
  int head_dim = 0;      // d
  KvFormat format = KvFormat::kF16;

  // Bytes of one of K or V in a page, and of the whole page (K + V).
  size_t HalfBytes() const;
  size_t PageBytes() const { return 2 * HalfBytes(); }
};

class PagePool {
 public:
  // INVALID_ARGUMENT for a non-positive size or an unimplemented format.
  static StatusOr<std::unique_ptr<PagePool>> Create(PageLayout layout, int64_t max_pages);

  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  // A free page; RESOURCE_EXHAUSTED when max_pages are in use (or memory is short).
  StatusOr<PageId> Allocate();
  void Free(PageId id);

  void* Keys(PageId id) const;    // [page_tokens, G, d]
  void* Values(PageId id) const;  // [page_tokens, G, d]

  const PageLayout& layout() const { return layout_; }
  DType dtype() const { return dtype_; }
  int64_t max_pages() const { return max_pages_; }
  int64_t pages_in_use() const;
  size_t bytes_in_use() const { return static_cast<size_t>(pages_in_use()) * layout_.PageBytes(); }
  size_t bytes_reserved() const;

 private:
  PagePool(PageLayout layout, DType dtype, int64_t max_pages);
  static constexpr int64_t kPagesPerChunk = 64;

  const PageLayout layout_;
  const DType dtype_;
  const int64_t max_pages_;
  mutable std::mutex mu_;
  std::vector<Buffer> chunks_;   // each kPagesPerChunk pages
  std::vector<char*> page_ptr_;  // page id -> base address
  std::vector<PageId> free_;
  int64_t in_use_ = 0;
};

}  // namespace framezip::engine::kv
