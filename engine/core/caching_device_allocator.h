// A caching device allocator in the manner of PyTorch's CUDACachingAllocator, simpler: cudaMalloc
// and cudaFree synchronise and cost tens of microseconds, so freed blocks are kept and reused
// instead of returned, and large raw segments are split into blocks and coalesced again on free.
//
// Sizes. Every request is rounded up to 512 bytes (min_block_bytes).
//   small pool  requests <= 1 MiB, carved from 2 MiB segments; a block is split whenever the rest
//               is at least 512 bytes.
//   large pool  requests < 10 MiB share 20 MiB segments; bigger ones get a segment of their size
//               rounded up to 2 MiB (so the KV page pool, one big request, wastes < 2 MiB). A
//               block is split only when the rest is more than 1 MiB (smaller rests would be
//               useless to the large pool).
//   Small requests never take large blocks and vice versa, which keeps long-lived big buffers
//   from pinning small-pool segments.
// A freed block merges with its free neighbours in the same segment; a segment returns to the
// raw allocator only from EmptyCache() (or the out-of-memory retry), when all of it is free.
//
// Streams. Every block belongs to the stream it was allocated on and is reused only for that
// stream, so stream order alone makes reuse safe: a kernel still reading a freed block runs
// before any later kernel on the same stream that gets it. Per-stream free lists come from
// ordering the free sets by (stream, size, address). Using a block on another stream is the
// caller's responsibility: synchronise that stream (or record an event and wait on it) before
// Free(); there is no record_stream.
//
// Out of memory. When the raw allocator reports RESOURCE_EXHAUSTED, the allocator frees every
// fully free cached segment and retries once; if that fails too it returns RESOURCE_EXHAUSTED
// naming the requested bytes, the device's free bytes and its own reserved/allocated bytes. Other
// raw errors pass through unchanged.
//
// Thread-safety: every method is safe to call from any thread (one mutex; the raw allocator is
// called under it, as in PyTorch, since cudaMalloc/cudaFree serialise anyway).
// Lifetime: the allocator must outlive every block it handed out (the process-wide per-device
// instance never dies). Destroying it frees only fully free segments; segments with live blocks
// are deliberately leaked rather than pulled from under their users.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "common/status.h"
#include "engine/core/raw_device_allocator.h"

namespace framezip::engine {

struct CachingAllocatorOptions {
  size_t min_block_bytes = 512;                // rounding granularity and smallest split-off rest
  size_t small_request_max_bytes = 1 << 20;    // <= this: small pool
  size_t small_segment_bytes = 2 << 20;        // raw segment size of the small pool
  size_t medium_request_max_bytes = 10 << 20;  // < this (and > small): shares a medium segment
  size_t medium_segment_bytes = 20 << 20;      // raw segment size for medium requests
  size_t large_segment_round_bytes = 2 << 20;  // bigger requests: own segment rounded up to this

  // INVALID_ARGUMENT when the sizes are inconsistent (not powers of two where they must be,
  // segments smaller than the requests they serve).
  Status Validate() const;
};

// All byte counts are of blocks (rounded sizes) unless named "requested". Monotonic counters
// count since construction.
struct CachingAllocatorStats {
  size_t allocated_bytes = 0;       // live blocks
  size_t requested_bytes = 0;       // what the callers of the live blocks asked for
  size_t reserved_bytes = 0;        // raw segments held (live + cached)
  size_t peak_allocated_bytes = 0;  // since construction or ResetPeakStats()
  size_t peak_reserved_bytes = 0;
  int64_t live_blocks = 0;
  int64_t segments = 0;    // raw segments held
  int64_t raw_allocs = 0;  // successful RawDeviceAllocator::Allocate calls (cudaMalloc)
  int64_t raw_frees = 0;
  int64_t cache_hits = 0;    // requests served from a cached block, no raw call
  int64_t cache_misses = 0;  // requests that needed a new segment
  int64_t oom_retries = 0;   // raw allocations that failed and were retried after a flush
  int64_t ooms = 0;          // requests that failed with RESOURCE_EXHAUSTED after the retry
};

class CachingDeviceAllocator {
 public:
  // `raw` must outlive the allocator. Options are checked with FZ_CHECK (a configuration bug);
  // use Create() for configured values.
  explicit CachingDeviceAllocator(RawDeviceAllocator* raw, CachingAllocatorOptions options = {});
  static StatusOr<std::unique_ptr<CachingDeviceAllocator>> Create(RawDeviceAllocator* raw,
                                                                  CachingAllocatorOptions options);
  ~CachingDeviceAllocator();
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  // A block of at least `bytes` (0 gives a minimal, unique block), aligned to min_block_bytes
  // relative to a 256-byte aligned segment, for use on `stream`. RESOURCE_EXHAUSTED as described
  // above; INVALID_ARGUMENT for a size that overflows when rounded.
  StatusOr<void*> Allocate(size_t bytes, StreamId stream = 0);

  // Returns a block to the cache. `ptr` must come from Allocate() and not be freed yet (checked:
  // a double or foreign free aborts, since it means memory corruption is already under way).
  void Free(void* ptr);

  // Allocate() wrapped so that the last shared_ptr copy frees the block (for Buffer::Adopt).
  StatusOr<std::shared_ptr<void>> AllocateShared(size_t bytes, StreamId stream = 0);

  // Returns every fully free cached segment to the raw allocator. Live blocks are untouched.
  void EmptyCache();

  CachingAllocatorStats stats() const;
  void ResetPeakStats();
  const CachingAllocatorOptions& options() const { return options_; }

 private:
  // A contiguous piece of one segment. Blocks of a segment form a doubly linked list in address
  // order; a segment's head block has prev == nullptr.
  struct Block {
    StreamId stream = 0;
    size_t size = 0;
    char* ptr = nullptr;
    bool small = false;  // which pool
    bool allocated = false;
    size_t requested = 0;  // while allocated
    Block* prev = nullptr;
    Block* next = nullptr;
  };
  // Free blocks ordered by (stream, size, address): lower_bound finds the best fit on a stream.
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BlockOrder>;

  size_t RoundedSize(size_t bytes) const;
  size_t SegmentSize(size_t rounded) const;
  FreeSet& PoolOf(bool small) { return small ? small_free_ : large_free_; }
  Block* TakeFreeBlock(bool small, StreamId stream, size_t rounded);
  StatusOr<Block*> NewSegment(bool small, StreamId stream, size_t rounded);
  void SplitIfWorthIt(Block* block, size_t rounded);
  void ReleaseCachedSegmentsLocked();

  RawDeviceAllocator* const raw_;
  const CachingAllocatorOptions options_;
  mutable std::mutex mutex_;
  FreeSet small_free_;
  FreeSet large_free_;
  std::unordered_map<void*, Block*> live_;
  CachingAllocatorStats stats_;
};

}  // namespace framezip::engine
