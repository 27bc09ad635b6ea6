// A small pool of pinned (page-locked) host buffers for staging KV restore/offload copies.
//
// Why: cudaMemcpyAsync is only truly asynchronous from pinned memory, and cudaHostAlloc is slow
// (it maps pages for the GPU, milliseconds per call), so staging buffers are allocated once and
// reused. A buffer still read or written by an in-flight async copy is returned with a CopyFence
// (a recorded cudaEvent in production) and handed out again only after the fence completes.
//
// Sizes: buffers are powers of two, at least min_buffer_bytes, so a few distinct sizes serve all
// requests. Buffers kept in the pool total at most max_pooled_bytes; when a new one would exceed
// that, idle buffers are freed first, then (if the rest is fenced) the pool waits on a fence and
// reuses or frees that buffer. If every pooled byte is leased out, or the request alone exceeds the
// budget, an "overflow" buffer is allocated and freed (after its fence) when returned, so staging
// never fails for lack of budget, only when the host is out of pinned memory (RESOURCE_EXHAUSTED).
//
// The pinned allocator (cudaHostAlloc / cudaFreeHost) and the fences (cudaEvent) are injected
// (cuda_staging.h makes the CUDA ones), so the pool's logic is tested with host memory.
// Thread-safe (one mutex; a fence wait happens under it, which is fine for copies of a few MiB).
// The pool must outlive its leases; destroying it waits for every pending fence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace framezip::engine {

// Page-locked host memory (cudaHostAlloc in production).
class RawHostAllocator {
 public:
  virtual ~RawHostAllocator() = default;
  // RESOURCE_EXHAUSTED when the host cannot pin that much.
  virtual StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr, size_t bytes) = 0;
};

// Completion of work enqueued before it on a stream (a recorded cudaEvent in production).
class CopyFence {
 public:
  virtual ~CopyFence() = default;
  // True once the work has completed; never blocks.
  virtual bool Done() = 0;
  // Blocks until the work has completed; after an OK return Done() is true. A CUDA error (a sticky
  // one marks the device unhealthy) means the work will never complete correctly.
  virtual Status Wait() = 0;
};

struct PinnedHostPoolOptions {
  size_t min_buffer_bytes = 1 << 20;     // smallest buffer (power of two)
  size_t max_pooled_bytes = 256u << 20;  // kept in the pool; overflow buffers are not kept
};

struct PinnedHostPoolStats {
  size_t pooled_bytes = 0;    // buffers kept (idle, leased or fenced), within max_pooled_bytes
  size_t overflow_bytes = 0;  // overflow buffers alive now
  int64_t buffers = 0;        // pooled buffers
  int64_t leased = 0;         // leases alive (pooled and overflow)
  int64_t fenced = 0;         // buffers returned whose fence has not been seen complete
  int64_t raw_allocs = 0;     // RawHostAllocator::Allocate calls that succeeded (cudaHostAlloc)
  int64_t raw_frees = 0;
  int64_t hits = 0;    // Acquire served by an existing buffer
  int64_t misses = 0;  // Acquire that allocated
  int64_t overflow_allocs = 0;
  int64_t fence_waits = 0;  // times Acquire blocked on a fence to make room
};

class PinnedHostPool {
 private:
  struct Slot;

 public:
  // A leased buffer. Move-only; returning it (destructor or Reset) makes it reusable at once,
  // ReleaseAfter makes it reusable once the fence completes.
  class Lease {
   public:
    Lease() = default;
    ~Lease() { Reset(); }
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    void* data() const;
    size_t capacity() const;  // >= the bytes asked for
    bool empty() const { return slot_ == nullptr; }

    // Returns the buffer now: only when no copy still uses it.
    void Reset();
    // Returns the buffer; the pool reuses (or frees) it only after `fence` is done. A null fence
    // is the same as Reset().
    void ReleaseAfter(std::shared_ptr<CopyFence> fence);

   private:
    friend class PinnedHostPool;
    Lease(PinnedHostPool* pool, Slot* slot) : pool_(pool), slot_(slot) {}
    PinnedHostPool* pool_ = nullptr;
    Slot* slot_ = nullptr;
  };

  // `raw` must outlive the pool. Options are checked with FZ_CHECK (min_buffer_bytes must be a
  // power of two).
  PinnedHostPool(RawHostAllocator* raw, PinnedHostPoolOptions options = {});
  ~PinnedHostPool();
  PinnedHostPool(const PinnedHostPool&) = delete;
  PinnedHostPool& operator=(const PinnedHostPool&) = delete;

  // A buffer of at least `bytes`. RESOURCE_EXHAUSTED when pinned memory cannot be allocated even
  // after freeing the idle buffers; a fence's error when waiting for one failed.
  StatusOr<Lease> Acquire(size_t bytes);

  // Frees every idle buffer (and every fenced one whose fence is done).
  void Trim();

  PinnedHostPoolStats stats() const;

 private:
  enum class SlotState { kIdle, kLeased, kFenced };
  struct Slot {
    void* ptr = nullptr;
    size_t bytes = 0;
    bool pooled = true;  // false: an overflow buffer, freed when it comes back
    SlotState state = SlotState::kIdle;
    std::shared_ptr<CopyFence> fence;
  };

  void Return(Slot* slot, std::shared_ptr<CopyFence> fence);
  void ReclaimDoneLocked();
  void FreeSlotLocked(Slot* slot);
  Slot* BestIdleLocked(size_t bytes);
  StatusOr<Slot*> NewSlotLocked(size_t bytes, bool pooled);

  RawHostAllocator* const raw_;
  const PinnedHostPoolOptions options_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Slot>> slots_;  // pooled and overflow buffers alike
  PinnedHostPoolStats stats_;
};

}  // namespace framezip::engine
