// PagePool: fixed-size KV pages of one format, shared by every sequence of an engine.
//
// A page holds `page_tokens` token slots of ONE layer, keys then values, and is one
// self-contained byte image of PageBytes():
//   f32/f16:   K [page_tokens, G, d] then V [page_tokens, G, d] elements, token-major so one
//              token's write is contiguous across heads.
//   int4/int2: the quantised layout of engine/kv/quant_page.h (codes + f16 scales/zeros inside).
// Pages are handed out by id and returned with Free(); memory is reserved lazily in chunks up to
// `max_pages`, so an idle engine stays small and a full one answers RESOURCE_EXHAUSTED instead of
// growing without bound. Pools of different formats may share one PageBudget (bytes of pages in
// use across all of them; see KvPools).
//
// Memory: host pages by default. A pool may instead live on a GPU and be preallocated whole at
// creation (PoolMemory), as a GPU engine reserves its KV pool once from the memory left after
// the weights (core/kv_pool_sizing.h), or take chunks from the device's caching allocator as
// pages are taken; its Keys()/Values() are then device pointers, written by kernels
// (engine/kv/page_io.h).
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
  int page_tokens = 32;  // token slots per page (= the key quantisation group of int4/int2 pages)
  int num_kv_heads = 0;  // G
  int head_dim = 0;      // d (a multiple of 32 for int4/int2)
  KvFormat format = KvFormat::kF16;

  // Bytes of the K part and the V part of a page (equal for dense formats), and of the whole page.
  size_t KeyBytes() const;
  size_t ValueBytes() const;
  size_t PageBytes() const { return KeyBytes() + ValueBytes(); }
  // Dense formats only: bytes of K (= of V). Kept for callers written before quantised pages.
  size_t HalfBytes() const { return KeyBytes(); }
  int64_t channels() const { return static_cast<int64_t>(num_kv_heads) * head_dim; }  // G·d
};

// A byte budget shared by several pools: Allocate() takes PageBytes() from it, Free() returns
// them. Counts bytes of pages in use, not memory reserved. Thread-safe.
class PageBudget {
 public:
  explicit PageBudget(int64_t max_bytes) : max_bytes_(max_bytes) {}
  bool TryTake(int64_t bytes);
  void Give(int64_t bytes);
  int64_t max_bytes() const { return max_bytes_; }
  int64_t used_bytes() const;

 private:
  const int64_t max_bytes_;
  mutable std::mutex mu_;
  int64_t used_ = 0;
};

// Where a pool's pages live, and whether all max_pages are reserved at creation (one
// allocation, so a full pool never allocates again) instead of in chunks as pages are taken.
struct PoolMemory {
  Device device = Device::Cpu();
  bool preallocate = false;
};

class PagePool {
 public:
  // INVALID_ARGUMENT for a non-positive size, an unimplemented format (low-rank) or a quantised
  // format with head_dim % 32 != 0. `budget` (optional, must outlive the pool) is shared with
  // other pools: Allocate also fails with RESOURCE_EXHAUSTED when it is used up. With
  // memory.preallocate, RESOURCE_EXHAUSTED (naming the bytes) when the device cannot hold the
  // pool; UNIMPLEMENTED / UNAVAILABLE for a GPU without CUDA / without a GPU.
  static StatusOr<std::unique_ptr<PagePool>> Create(PageLayout layout, int64_t max_pages,
                                                    PageBudget* budget = nullptr,
                                                    PoolMemory memory = {});

  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  // A free page; RESOURCE_EXHAUSTED when max_pages are in use (or memory is short).
  StatusOr<PageId> Allocate();
  void Free(PageId id);

  void* Keys(PageId id) const;    // the page's first byte; dense: [page_tokens, G, d]
  void* Values(PageId id) const;  // Keys + KeyBytes(); dense: [page_tokens, G, d]
  // Preallocated pools: page `id` is at base() + id·PageBytes() (one allocation), so callers may
  // address many pages with one kernel; nullptr for pools reserved in chunks.
  void* base() const { return memory_.preallocate ? page_ptr_.front() : nullptr; }

  const PageLayout& layout() const { return layout_; }
  Device device() const { return memory_.device; }
  KvFormat format() const { return layout_.format; }
  // Element type of a dense pool; kU8 for quantised pools.
  DType dtype() const { return dtype_; }
  int64_t max_pages() const { return max_pages_; }
  // The byte budget shared with other pools, or null (what low-rank blocks are charged to).
  PageBudget* budget() const { return budget_; }
  int64_t pages_in_use() const;
  size_t bytes_in_use() const { return static_cast<size_t>(pages_in_use()) * layout_.PageBytes(); }
  size_t bytes_reserved() const;

 private:
  PagePool(PageLayout layout, DType dtype, int64_t max_pages, PageBudget* budget,
           PoolMemory memory);
  static constexpr int64_t kPagesPerChunk = 64;
  StatusOr<PageId> AllocateLocked();  // takes mu_ itself; the budget is already charged
  // Reserves `add` more pages in one allocation and puts them on the free list (mu_ held).
  Status AddChunkLocked(int64_t add);

  const PageLayout layout_;
  const DType dtype_;
  const int64_t max_pages_;
  PageBudget* const budget_;
  const PoolMemory memory_;
  mutable std::mutex mu_;
  std::vector<Buffer> chunks_;   // each kPagesPerChunk pages
  std::vector<char*> page_ptr_;  // page id -> base address
  std::vector<PageId> free_;
  int64_t in_use_ = 0;
};

}  // namespace framezip::engine::kv
