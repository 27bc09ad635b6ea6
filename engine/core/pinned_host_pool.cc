#include "engine/core/pinned_host_pool.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace framezip::engine {

PinnedHostPool::Lease::Lease(Lease&& other) noexcept : pool_(other.pool_), slot_(other.slot_) {
  other.pool_ = nullptr;
  other.slot_ = nullptr;
}

PinnedHostPool::Lease& PinnedHostPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = other.pool_;
    slot_ = other.slot_;
    other.pool_ = nullptr;
    other.slot_ = nullptr;
  }
  return *this;
}

void* PinnedHostPool::Lease::data() const { return slot_ == nullptr ? nullptr : slot_->ptr; }
size_t PinnedHostPool::Lease::capacity() const { return slot_ == nullptr ? 0 : slot_->bytes; }

void PinnedHostPool::Lease::Reset() { ReleaseAfter(nullptr); }

void PinnedHostPool::Lease::ReleaseAfter(std::shared_ptr<CopyFence> fence) {
  if (slot_ == nullptr) return;
  pool_->Return(slot_, std::move(fence));
  pool_ = nullptr;
  slot_ = nullptr;
}

PinnedHostPool::PinnedHostPool(RawHostAllocator* raw, PinnedHostPoolOptions options)
    : raw_(raw), options_(options) {
  FZ_CHECK(raw_ != nullptr);
  FZ_CHECK(std::has_single_bit(options_.min_buffer_bytes));
}

PinnedHostPool::~PinnedHostPool() {
  std::lock_guard<std::mutex> lock(mutex_);
  FZ_CHECK_EQ(stats_.leased, 0);  // a lease outliving its pool would return into freed memory
  for (auto& slot : slots_) {
    // An async copy may still use the buffer: it must finish before the memory is unpinned.
    if (slot->fence != nullptr) (void)slot->fence->Wait();
    raw_->Free(slot->ptr, slot->bytes);
  }
}

void PinnedHostPool::FreeSlotLocked(Slot* slot) {
  raw_->Free(slot->ptr, slot->bytes);
  ++stats_.raw_frees;
  if (slot->pooled) {
    stats_.pooled_bytes -= slot->bytes;
    --stats_.buffers;
  } else {
    stats_.overflow_bytes -= slot->bytes;
  }
  if (slot->state == SlotState::kFenced) --stats_.fenced;
  slots_.erase(std::find_if(slots_.begin(), slots_.end(),
                            [slot](const std::unique_ptr<Slot>& s) { return s.get() == slot; }));
}

void PinnedHostPool::ReclaimDoneLocked() {
  std::vector<Slot*> finished_overflow;
  for (auto& slot : slots_) {
    if (slot->state != SlotState::kFenced || !slot->fence->Done()) continue;
    if (!slot->pooled) {
      finished_overflow.push_back(slot.get());
      continue;
    }
    slot->fence.reset();
    slot->state = SlotState::kIdle;
    --stats_.fenced;
  }
  for (Slot* slot : finished_overflow) FreeSlotLocked(slot);
}

PinnedHostPool::Slot* PinnedHostPool::BestIdleLocked(size_t bytes) {
  Slot* best = nullptr;
  for (auto& slot : slots_) {
    if (slot->state == SlotState::kIdle && slot->bytes >= bytes &&
        (best == nullptr || slot->bytes < best->bytes)) {
      best = slot.get();
    }
  }
  return best;
}

StatusOr<PinnedHostPool::Slot*> PinnedHostPool::NewSlotLocked(size_t bytes, bool pooled) {
  StatusOr<void*> ptr = raw_->Allocate(bytes);
  if (!ptr.ok() && absl::IsResourceExhausted(ptr.status())) {
    // Idle buffers hold pinned pages the host may need: give them back and try once more.
    std::vector<Slot*> idle;
    for (auto& slot : slots_) {
      if (slot->state == SlotState::kIdle) idle.push_back(slot.get());
    }
    for (Slot* slot : idle) FreeSlotLocked(slot);
    if (!idle.empty()) ptr = raw_->Allocate(bytes);
  }
  if (!ptr.ok()) {
    if (!absl::IsResourceExhausted(ptr.status())) return ptr.status();
    return ResourceExhaustedError(
        "pinned host staging buffer of {} bytes: out of pinned memory ({} bytes pooled, {} in "
        "overflow buffers)",
        bytes, stats_.pooled_bytes, stats_.overflow_bytes);
  }
  auto slot = std::make_unique<Slot>();
  slot->ptr = *ptr;
  slot->bytes = bytes;
  slot->pooled = pooled;
  ++stats_.raw_allocs;
  if (pooled) {
    stats_.pooled_bytes += bytes;
    ++stats_.buffers;
  } else {
    stats_.overflow_bytes += bytes;
    ++stats_.overflow_allocs;
  }
  slots_.push_back(std::move(slot));
  return slots_.back().get();
}

StatusOr<PinnedHostPool::Lease> PinnedHostPool::Acquire(size_t bytes) {
  if (bytes > std::numeric_limits<size_t>::max() / 2) {
    return InvalidArgumentError("pinned staging buffer of {} bytes is impossibly large", bytes);
  }
  const size_t size =
      std::max(options_.min_buffer_bytes, std::bit_ceil(std::max<size_t>(bytes, 1)));
  std::lock_guard<std::mutex> lock(mutex_);
  bool counted_miss = false;
  while (true) {
    ReclaimDoneLocked();
    Slot* slot = BestIdleLocked(bytes);
    if (slot == nullptr) {
      if (!counted_miss) ++stats_.misses;
      counted_miss = true;
      const bool fits = stats_.pooled_bytes + size <= options_.max_pooled_bytes;
      if (fits || size > options_.max_pooled_bytes) {
        FZ_ASSIGN_OR_RETURN(slot, NewSlotLocked(size, /*pooled=*/fits));
      } else {
        // Make room: free an idle buffer (too small, or BestIdle would have found it), else wait
        // for a fenced one, else everything is leased out and the request overflows.
        auto idle = std::find_if(slots_.begin(), slots_.end(), [](const auto& s) {
          return s->pooled && s->state == SlotState::kIdle;
        });
        if (idle != slots_.end()) {
          FreeSlotLocked(idle->get());
          continue;
        }
        auto fenced = std::find_if(slots_.begin(), slots_.end(),
                                   [](const auto& s) { return s->state == SlotState::kFenced; });
        if (fenced != slots_.end()) {
          ++stats_.fence_waits;
          FZ_RETURN_IF_ERROR((*fenced)->fence->Wait());
          continue;  // Done() is now true: the reclaim at the top frees or reuses it
        }
        FZ_ASSIGN_OR_RETURN(slot, NewSlotLocked(size, /*pooled=*/false));
      }
    } else if (!counted_miss) {
      ++stats_.hits;
    }
    slot->state = SlotState::kLeased;
    ++stats_.leased;
    return Lease(this, slot);
  }
}

void PinnedHostPool::Return(Slot* slot, std::shared_ptr<CopyFence> fence) {
  std::lock_guard<std::mutex> lock(mutex_);
  --stats_.leased;
  if (fence != nullptr && !fence->Done()) {
    slot->state = SlotState::kFenced;
    slot->fence = std::move(fence);
    ++stats_.fenced;
    return;
  }
  slot->state = SlotState::kIdle;
  if (!slot->pooled) FreeSlotLocked(slot);
}

void PinnedHostPool::Trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  ReclaimDoneLocked();
  std::vector<Slot*> idle;
  for (auto& slot : slots_) {
    if (slot->state == SlotState::kIdle) idle.push_back(slot.get());
  }
  for (Slot* slot : idle) FreeSlotLocked(slot);
}

PinnedHostPoolStats PinnedHostPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace framezip::engine
