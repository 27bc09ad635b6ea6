#include "engine/kv/page_pool.h"

#include <algorithm>
#include <limits>

#include "engine/core/device_memory.h"
#include "engine/kv/quant_page.h"

namespace framezip::engine::kv {

size_t PageLayout::KeyBytes() const {
  if (IsQuantized(format)) return QuantPageKeyBytes(*this);
  const auto dtype = KvFormatDType(format);
  const size_t elem = dtype.ok() ? DTypeSize(*dtype) : 0;
  return static_cast<size_t>(page_tokens) * num_kv_heads * head_dim * elem;
}

size_t PageLayout::ValueBytes() const {
  return IsQuantized(format) ? QuantPageValueBytes(*this) : KeyBytes();
}

bool PageBudget::TryTake(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (used_ + bytes > max_bytes_) return false;
  used_ += bytes;
  return true;
}

void PageBudget::Give(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  used_ -= bytes;
}

int64_t PageBudget::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

StatusOr<std::unique_ptr<PagePool>> PagePool::Create(PageLayout layout, int64_t max_pages,
                                                     PageBudget* budget, PoolMemory memory) {
  if (layout.page_tokens <= 0 || layout.num_kv_heads <= 0 || layout.head_dim <= 0 ||
      max_pages <= 0 || max_pages > std::numeric_limits<PageId>::max()) {
    return InvalidArgumentError(
        "KV page pool: page_tokens {}, kv heads {}, head_dim {}, max_pages {} must be positive "
        "(max_pages below 2^31)",
        layout.page_tokens, layout.num_kv_heads, layout.head_dim, max_pages);
  }
  DType dtype = DType::kU8;
  if (IsQuantized(layout.format)) {
    FZ_RETURN_IF_ERROR(CheckQuantPageLayout(layout));
  } else {
    FZ_ASSIGN_OR_RETURN(dtype, KvFormatDType(layout.format));
  }
  std::unique_ptr<PagePool> pool(new PagePool(layout, dtype, max_pages, budget, memory));
  if (memory.preallocate) {
    std::lock_guard<std::mutex> lock(pool->mu_);
    const Status reserved = pool->AddChunkLocked(max_pages);
    if (!reserved.ok()) {
      return Annotate(reserved,
                      fmt::format("KV page pool: preallocating {} pages ({} MiB) on {}", max_pages,
                                  max_pages * layout.PageBytes() >> 20, DeviceName(memory.device)));
    }
  }
  return pool;
}

PagePool::PagePool(PageLayout layout, DType dtype, int64_t max_pages, PageBudget* budget,
                   PoolMemory memory)
    : layout_(layout), dtype_(dtype), max_pages_(max_pages), budget_(budget), memory_(memory) {}

Status PagePool::AddChunkLocked(int64_t add) {
  const int64_t have = static_cast<int64_t>(page_ptr_.size());
  FZ_ASSIGN_OR_RETURN(Buffer chunk, Buffer::Allocate(memory_.device, static_cast<size_t>(add) *
                                                                         layout_.PageBytes()));
  char* base = static_cast<char*>(chunk.data());
  chunks_.push_back(std::move(chunk));
  // Push in reverse so pages are handed out in address order.
  for (int64_t i = add - 1; i >= 0; --i) {
    page_ptr_.push_back(nullptr);
    free_.push_back(static_cast<PageId>(have + i));
  }
  for (int64_t i = 0; i < add; ++i) page_ptr_[have + i] = base + i * layout_.PageBytes();
  return absl::OkStatus();
}

StatusOr<PageId> PagePool::Allocate() {
  const int64_t page_bytes = static_cast<int64_t>(layout_.PageBytes());
  if (budget_ != nullptr && !budget_->TryTake(page_bytes)) {
    return ResourceExhaustedError("KV cache full: the budget of {} MiB is in use",
                                  budget_->max_bytes() >> 20);
  }
  StatusOr<PageId> id = AllocateLocked();
  if (!id.ok()) {
    if (budget_ != nullptr) budget_->Give(page_bytes);
    return id;
  }
  // A page is handed out zeroed: its unfilled slots are part of the page image the codec exports
  // (kv/page_codec.h), and must not carry a freed page's K/V — another conversation's — into this
  // conversation's stored blocks.
  const Status zeroed = ZeroBytes(Keys(*id), memory_.device, layout_.PageBytes());
  if (!zeroed.ok()) {
    Free(*id);
    return zeroed;
  }
  return id;
}

StatusOr<PageId> PagePool::AllocateLocked() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) {
    const int64_t have = static_cast<int64_t>(page_ptr_.size());
    if (have >= max_pages_) {
      return ResourceExhaustedError("KV cache full: all {} pages ({} MiB) are in use", max_pages_,
                                    max_pages_ * layout_.PageBytes() >> 20);
    }
    FZ_RETURN_IF_ERROR(AddChunkLocked(std::min(kPagesPerChunk, max_pages_ - have)));
  }
  const PageId id = free_.back();
  free_.pop_back();
  ++in_use_;
  return id;
}

void PagePool::Free(PageId id) {
  std::lock_guard<std::mutex> lock(mu_);
  FZ_CHECK(id >= 0 && id < static_cast<PageId>(page_ptr_.size()));
  free_.push_back(id);
  --in_use_;
  if (budget_ != nullptr) budget_->Give(static_cast<int64_t>(layout_.PageBytes()));
}

void* PagePool::Keys(PageId id) const {
  // A preallocated pool's page table never changes after Create: no lock (decode asks for every
  // page of every sequence, each layer, each step).
  if (memory_.preallocate) return page_ptr_[id];
  std::lock_guard<std::mutex> lock(mu_);
  return page_ptr_[id];
}

void* PagePool::Values(PageId id) const {
  return static_cast<char*>(Keys(id)) + layout_.KeyBytes();
}

int64_t PagePool::pages_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

size_t PagePool::bytes_reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return page_ptr_.size() * layout_.PageBytes();
}

}  // namespace framezip::engine::kv
