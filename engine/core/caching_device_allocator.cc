#include "engine/core/caching_device_allocator.h"

#include <algorithm>
#include <limits>
#include <tuple>
#include <vector>

namespace framezip::engine {
namespace {

bool IsPowerOfTwo(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

void RaisePeak(size_t value, size_t* peak) { *peak = std::max(*peak, value); }

}  // namespace

Status CachingAllocatorOptions::Validate() const {
  if (!IsPowerOfTwo(min_block_bytes) || !IsPowerOfTwo(large_segment_round_bytes)) {
    return InvalidArgumentError(
        "caching allocator: min_block_bytes ({}) and large_segment_round_bytes ({}) must be "
        "powers of two",
        min_block_bytes, large_segment_round_bytes);
  }
  if (large_segment_round_bytes < min_block_bytes) {
    return InvalidArgumentError("caching allocator: large_segment_round_bytes {} < block size {}",
                                large_segment_round_bytes, min_block_bytes);
  }
  if (!(min_block_bytes <= small_request_max_bytes &&
        small_request_max_bytes < medium_request_max_bytes)) {
    return InvalidArgumentError(
        "caching allocator: need min_block_bytes <= small_request_max_bytes < "
        "medium_request_max_bytes, got {} {} {}",
        min_block_bytes, small_request_max_bytes, medium_request_max_bytes);
  }
  if (small_segment_bytes < small_request_max_bytes ||
      medium_segment_bytes < medium_request_max_bytes ||
      small_segment_bytes % min_block_bytes != 0 || medium_segment_bytes % min_block_bytes != 0) {
    return InvalidArgumentError(
        "caching allocator: segments ({} small, {} medium) must hold their largest request and "
        "be multiples of {}",
        small_segment_bytes, medium_segment_bytes, min_block_bytes);
  }
  return absl::OkStatus();
}

bool CachingDeviceAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

CachingDeviceAllocator::CachingDeviceAllocator(RawDeviceAllocator* raw,
                                               CachingAllocatorOptions options)
    : raw_(raw), options_(options) {
  FZ_CHECK(raw_ != nullptr);
  FZ_CHECK(options_.Validate().ok());
}

StatusOr<std::unique_ptr<CachingDeviceAllocator>> CachingDeviceAllocator::Create(
    RawDeviceAllocator* raw, CachingAllocatorOptions options) {
  if (raw == nullptr) return InvalidArgumentError("caching allocator: no raw allocator");
  FZ_RETURN_IF_ERROR(options.Validate());
  return std::make_unique<CachingDeviceAllocator>(raw, options);
}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  ReleaseCachedSegmentsLocked();
  // What is left belongs to segments with live blocks: leaked on purpose (see the header), but the
  // bookkeeping of the free blocks in them is ours to delete.
  for (Block* block : small_free_) delete block;
  for (Block* block : large_free_) delete block;
  for (auto& [ptr, block] : live_) delete block;
}

size_t CachingDeviceAllocator::RoundedSize(size_t bytes) const {
  const size_t m = options_.min_block_bytes;
  return bytes == 0 ? m : (bytes + m - 1) / m * m;
}

size_t CachingDeviceAllocator::SegmentSize(size_t rounded) const {
  if (rounded <= options_.small_request_max_bytes) return options_.small_segment_bytes;
  if (rounded < options_.medium_request_max_bytes) return options_.medium_segment_bytes;
  const size_t r = options_.large_segment_round_bytes;
  return (rounded + r - 1) / r * r;
}

CachingDeviceAllocator::Block* CachingDeviceAllocator::TakeFreeBlock(bool small, StreamId stream,
                                                                     size_t rounded) {
  FreeSet& pool = PoolOf(small);
  Block key;
  key.stream = stream;
  key.size = rounded;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

StatusOr<CachingDeviceAllocator::Block*> CachingDeviceAllocator::NewSegment(bool small,
                                                                            StreamId stream,
                                                                            size_t rounded) {
  const size_t segment_bytes = SegmentSize(rounded);
  StatusOr<void*> ptr = raw_->Allocate(segment_bytes, stream);
  if (!ptr.ok() && absl::IsResourceExhausted(ptr.status())) {
    // Cached but unused segments may be what fills the device: give them back and try again.
    ++stats_.oom_retries;
    ReleaseCachedSegmentsLocked();
    ptr = raw_->Allocate(segment_bytes, stream);
  }
  if (!ptr.ok()) {
    if (!absl::IsResourceExhausted(ptr.status())) return ptr.status();
    ++stats_.ooms;
    const StatusOr<size_t> free_bytes = raw_->FreeBytes();
    return ResourceExhaustedError(
        "out of GPU memory: requested {} bytes (a {} byte segment) but the device has {} bytes "
        "free; this allocator holds {} bytes reserved, {} of them allocated",
        rounded, segment_bytes,
        free_bytes.ok() ? fmt::format("{}", *free_bytes) : std::string("an unknown number of"),
        stats_.reserved_bytes, stats_.allocated_bytes);
  }
  ++stats_.raw_allocs;
  ++stats_.segments;
  stats_.reserved_bytes += segment_bytes;
  RaisePeak(stats_.reserved_bytes, &stats_.peak_reserved_bytes);
  auto* block = new Block;
  block->stream = stream;
  block->size = segment_bytes;
  block->ptr = static_cast<char*>(*ptr);
  block->small = small;
  return block;
}

void CachingDeviceAllocator::SplitIfWorthIt(Block* block, size_t rounded) {
  const size_t rest = block->size - rounded;
  // A large-pool rest under the small-pool limit could only serve requests the large pool never
  // sees, so it stays inside the block instead.
  const bool worth_it =
      block->small ? rest >= options_.min_block_bytes : rest > options_.small_request_max_bytes;
  if (!worth_it) return;
  auto* remainder = new Block;
  remainder->stream = block->stream;
  remainder->size = rest;
  remainder->ptr = block->ptr + rounded;
  remainder->small = block->small;
  remainder->prev = block;
  remainder->next = block->next;
  if (block->next != nullptr) block->next->prev = remainder;
  block->next = remainder;
  block->size = rounded;
  PoolOf(remainder->small).insert(remainder);
}

StatusOr<void*> CachingDeviceAllocator::Allocate(size_t bytes, StreamId stream) {
  // Reject sizes whose rounding (to a block, then to a segment) would overflow.
  if (bytes > std::numeric_limits<size_t>::max() / 2) {
    return InvalidArgumentError("device allocation of {} bytes is impossibly large", bytes);
  }
  const size_t rounded = RoundedSize(bytes);
  const bool small = rounded <= options_.small_request_max_bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = TakeFreeBlock(small, stream, rounded);
  if (block != nullptr) {
    ++stats_.cache_hits;
  } else {
    ++stats_.cache_misses;
    FZ_ASSIGN_OR_RETURN(block, NewSegment(small, stream, rounded));
  }
  SplitIfWorthIt(block, rounded);
  block->allocated = true;
  block->requested = bytes;
  live_.emplace(block->ptr, block);
  ++stats_.live_blocks;
  stats_.allocated_bytes += block->size;
  stats_.requested_bytes += bytes;
  RaisePeak(stats_.allocated_bytes, &stats_.peak_allocated_bytes);
  return static_cast<void*>(block->ptr);
}

void CachingDeviceAllocator::Free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  FZ_CHECK(it != live_.end());  // a double free or a pointer this allocator never made
  Block* block = it->second;
  live_.erase(it);
  --stats_.live_blocks;
  stats_.allocated_bytes -= block->size;
  stats_.requested_bytes -= block->requested;
  block->allocated = false;
  block->requested = 0;
  FreeSet& pool = PoolOf(block->small);
  // Coalesce with free neighbours so that a fully freed segment is one block again.
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

StatusOr<std::shared_ptr<void>> CachingDeviceAllocator::AllocateShared(size_t bytes,
                                                                       StreamId stream) {
  FZ_ASSIGN_OR_RETURN(void* ptr, Allocate(bytes, stream));
  return std::shared_ptr<void>(ptr, [this](void* p) { Free(p); });
}

void CachingDeviceAllocator::ReleaseCachedSegmentsLocked() {
  for (FreeSet* pool : {&small_free_, &large_free_}) {
    std::vector<Block*> whole;
    for (Block* block : *pool) {
      if (block->prev == nullptr && block->next == nullptr) whole.push_back(block);
    }
    for (Block* block : whole) {
      pool->erase(block);
      raw_->Free(block->ptr, block->size, block->stream);
      ++stats_.raw_frees;
      --stats_.segments;
      stats_.reserved_bytes -= block->size;
      delete block;
    }
  }
}

void CachingDeviceAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mutex_);
  ReleaseCachedSegmentsLocked();
}

CachingAllocatorStats CachingDeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingDeviceAllocator::ResetPeakStats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

}  // namespace framezip::engine
