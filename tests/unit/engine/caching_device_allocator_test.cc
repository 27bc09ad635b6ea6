// The caching allocator against a fake raw allocator: host memory with a capacity, so reuse,
// splitting, coalescing, the out-of-memory retry and the stats are checked without a GPU.
#include "engine/core/caching_device_allocator.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "tests/testing/random.h"

namespace framezip::engine {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

// Host memory standing in for cudaMalloc: 256-byte aligned, refuses (RESOURCE_EXHAUSTED) beyond
// `capacity`, and records every live segment so the test can check what the allocator hands out.
class FakeRawAllocator final : public RawDeviceAllocator {
 public:
  explicit FakeRawAllocator(size_t capacity) : capacity_(capacity) {}
  ~FakeRawAllocator() override {
    for (auto& [ptr, seg] : segments_) std::free(ptr);
  }

  StatusOr<void*> Allocate(size_t bytes, StreamId stream) override {
    ++allocate_calls;
    if (!fail_with.ok()) return fail_with;
    if (used_ + bytes > capacity_) {
      ++refusals;
      return ResourceExhaustedError("fake device full: {} + {} > {}", used_, bytes, capacity_);
    }
    void* ptr = std::aligned_alloc(256, bytes);
    REQUIRE(ptr != nullptr);
    segments_[ptr] = {bytes, stream};
    used_ += bytes;
    return ptr;
  }

  void Free(void* ptr, size_t bytes, StreamId stream) override {
    auto it = segments_.find(ptr);
    // A free of something never allocated, or with the wrong size or stream, is an allocator bug.
    if (it == segments_.end() || it->second.bytes != bytes || it->second.stream != stream) {
      ++bad_frees;
      return;
    }
    used_ -= bytes;
    segments_.erase(it);
    std::free(ptr);
  }

  StatusOr<size_t> FreeBytes() override { return capacity_ - used_; }

  // True when [p, p + bytes) lies inside one live segment.
  bool Inside(const void* p, size_t bytes) const {
    const auto* c = static_cast<const char*>(p);
    auto it = segments_.upper_bound(const_cast<void*>(p));
    if (it == segments_.begin()) return false;
    --it;
    const auto* base = static_cast<const char*>(it->first);
    return c >= base && c + bytes <= base + it->second.bytes;
  }

  size_t used() const { return used_; }
  int64_t live_segments() const { return static_cast<int64_t>(segments_.size()); }

  Status fail_with = absl::OkStatus();
  int allocate_calls = 0;
  int refusals = 0;
  int bad_frees = 0;

 private:
  struct Segment {
    size_t bytes;
    StreamId stream;
  };
  size_t capacity_;
  size_t used_ = 0;
  std::map<void*, Segment> segments_;
};

char* Alloc(CachingDeviceAllocator& allocator, size_t bytes, StreamId stream = 0) {
  auto p = allocator.Allocate(bytes, stream);
  REQUIRE(p.ok());
  return static_cast<char*>(*p);
}

TEST_CASE("caching allocator reuses a freed block without a new raw allocation", "[unit][engine]") {
  FakeRawAllocator raw(64 * kMiB);
  CachingDeviceAllocator allocator(&raw);
  char* a = Alloc(allocator, 1000);
  allocator.Free(a);
  char* b = Alloc(allocator, 900);  // same 1024-byte class: the same block comes back
  CHECK(b == a);
  const auto s = allocator.stats();
  CHECK(s.raw_allocs == 1);
  CHECK(s.cache_misses == 1);
  CHECK(s.cache_hits == 1);
  CHECK(s.allocated_bytes == 1024);
  CHECK(s.requested_bytes == 900);
  CHECK(s.reserved_bytes == 2 * kMiB);
  CHECK(raw.used() == 2 * kMiB);
  allocator.Free(b);
}

TEST_CASE("caching allocator splits a segment and coalesces freed neighbours", "[unit][engine]") {
  FakeRawAllocator raw(64 * kMiB);
  CachingDeviceAllocator allocator(&raw);
  char* a = Alloc(allocator, 256 * kKiB);
  char* b = Alloc(allocator, 256 * kKiB);
  char* c = Alloc(allocator, 256 * kKiB);
  char* tiny = Alloc(allocator, 1);  // rounds to 512 bytes, still carved from the same segment
  CHECK(b == a + 256 * kKiB);
  CHECK(c == b + 256 * kKiB);
  CHECK(tiny == c + 256 * kKiB);
  CHECK(allocator.stats().raw_allocs == 1);
  CHECK(allocator.stats().allocated_bytes == 768 * kKiB + 512);

  // a and b merge into one 512 KiB hole; best fit picks it over the segment's large tail.
  allocator.Free(a);
  allocator.Free(b);
  char* ab = Alloc(allocator, 512 * kKiB);
  CHECK(ab == a);
  allocator.Free(ab);
  allocator.Free(tiny);
  allocator.Free(c);  // merges with the hole before it and the tail after it: one free segment

  CHECK(allocator.stats().segments == 1);
  CHECK(allocator.stats().allocated_bytes == 0);
  allocator.EmptyCache();
  const auto s = allocator.stats();
  CHECK(s.raw_frees == 1);  // only possible if every block coalesced back into the segment
  CHECK(s.reserved_bytes == 0);
  CHECK(raw.used() == 0);
  CHECK(raw.bad_frees == 0);
}

TEST_CASE("caching allocator sizes segments by pool and keeps the pools apart", "[unit][engine]") {
  FakeRawAllocator raw(256 * kMiB);
  CachingDeviceAllocator allocator(&raw);
  char* small = Alloc(allocator, kMiB);  // the largest small request
  CHECK(allocator.stats().reserved_bytes == 2 * kMiB);
  allocator.Free(small);

  char* big = Alloc(allocator, 13 * kMiB + 1);  // own segment, rounded up to 2 MiB
  CHECK(allocator.stats().raw_allocs == 2);     // it must not take the cached small block
  CHECK(allocator.stats().reserved_bytes == 2 * kMiB + 14 * kMiB);
  CHECK(allocator.stats().allocated_bytes == 14 * kMiB);  // the < 1 MiB rest is not split off
  allocator.Free(big);
  char* again = Alloc(allocator, 13 * kMiB + 512 * kKiB);  // fits the cached 14 MiB block
  CHECK(again == big);
  CHECK(allocator.stats().raw_allocs == 2);

  char* m1 = Alloc(allocator, kMiB + 1);  // a medium request: a 20 MiB segment
  CHECK(allocator.stats().raw_allocs == 3);
  CHECK(allocator.stats().reserved_bytes == 16 * kMiB + 20 * kMiB);
  char* m2 = Alloc(allocator, 3 * kMiB);  // shares the 20 MiB segment
  CHECK(m2 == m1 + kMiB + 512);
  CHECK(allocator.stats().raw_allocs == 3);
  CHECK(allocator.stats().allocated_bytes == 14 * kMiB + (kMiB + 512) + 3 * kMiB);
  allocator.Free(again);
  allocator.Free(m1);
  allocator.Free(m2);
  allocator.EmptyCache();
  CHECK(raw.used() == 0);
  CHECK(raw.bad_frees == 0);
}

TEST_CASE("caching allocator reuses blocks only on the stream that freed them", "[unit][engine]") {
  FakeRawAllocator raw(64 * kMiB);
  CachingDeviceAllocator allocator(&raw);
  const StreamId s1 = 0x1000, s2 = 0x2000;
  char* a = Alloc(allocator, 4096, s1);
  allocator.Free(a);
  char* b = Alloc(allocator, 4096, s2);
  CHECK(b != a);
  CHECK(allocator.stats().raw_allocs == 2);  // s1's cached block was not eligible
  char* c = Alloc(allocator, 4096, s1);
  CHECK(c == a);
  allocator.Free(b);
  allocator.Free(c);
  allocator.EmptyCache();
  CHECK(raw.used() == 0);
  CHECK(raw.bad_frees == 0);  // each segment went back with the stream it came from
}

TEST_CASE("caching allocator frees its cache and retries once when the device is full",
          "[unit][engine]") {
  FakeRawAllocator raw(4 * kMiB);  // room for two small segments
  CachingDeviceAllocator allocator(&raw);
  allocator.Free(Alloc(allocator, 512, /*stream=*/1));
  allocator.Free(Alloc(allocator, 512, /*stream=*/2));
  CHECK(raw.used() == 4 * kMiB);  // both cached, the device is full

  SECTION("the retry succeeds once the cache is released") {
    char* p = Alloc(allocator, 512, /*stream=*/3);
    const auto s = allocator.stats();
    CHECK(s.oom_retries == 1);
    CHECK(s.ooms == 0);
    CHECK(s.raw_frees == 2);
    CHECK(s.reserved_bytes == 2 * kMiB);
    allocator.Free(p);
  }
  SECTION("a request that cannot fit even then is RESOURCE_EXHAUSTED with the numbers") {
    char* held = Alloc(allocator, 512, /*stream=*/1);     // a live block: its segment stays
    auto p = allocator.Allocate(3 * kMiB, /*stream=*/1);  // needs a 20 MiB segment
    REQUIRE(p.status().code() == absl::StatusCode::kResourceExhausted);
    const std::string message = MessageOf(p.status());
    INFO(message);
    CHECK(message.find("requested 3145728 bytes") != std::string::npos);
    CHECK(message.find("a 20971520 byte segment") != std::string::npos);
    CHECK(message.find("has 2097152 bytes free") != std::string::npos);  // stream 2's went back
    const auto s = allocator.stats();
    CHECK(s.oom_retries == 1);
    CHECK(s.ooms == 1);
    CHECK(s.raw_frees == 1);  // only the fully free segment; the live block's was kept
    CHECK(raw.refusals == 2);
    allocator.Free(held);
  }
  allocator.EmptyCache();
  CHECK(raw.used() == 0);
  CHECK(raw.bad_frees == 0);
}

TEST_CASE("caching allocator passes other raw errors through without a retry", "[unit][engine]") {
  FakeRawAllocator raw(64 * kMiB);
  CachingDeviceAllocator allocator(&raw);
  raw.fail_with = absl::InternalError("cudaErrorIllegalAddress");
  auto p = allocator.Allocate(100);
  CHECK(p.status().code() == absl::StatusCode::kInternal);
  CHECK(raw.allocate_calls == 1);
  CHECK(allocator.stats().oom_retries == 0);
  CHECK(allocator.stats().ooms == 0);
}

TEST_CASE("caching allocator tracks peaks, shared ownership and rejects bad options",
          "[unit][engine]") {
  FakeRawAllocator raw(64 * kMiB);
  CachingDeviceAllocator allocator(&raw);
  {
    auto shared = allocator.AllocateShared(5000);
    REQUIRE(shared.ok());
    auto copy = *shared;
    CHECK(allocator.stats().live_blocks == 1);
    shared->reset();
    CHECK(allocator.stats().live_blocks == 1);  // `copy` still holds it
  }
  CHECK(allocator.stats().live_blocks == 0);
  CHECK(allocator.stats().peak_allocated_bytes == 5120);
  char* p = Alloc(allocator, 512);
  allocator.ResetPeakStats();
  CHECK(allocator.stats().peak_allocated_bytes == 512);
  allocator.Free(p);

  CachingAllocatorOptions bad;
  bad.min_block_bytes = 500;
  CHECK(CachingDeviceAllocator::Create(&raw, bad).status().code() ==
        absl::StatusCode::kInvalidArgument);
  bad = {};
  bad.small_segment_bytes = 512 * kKiB;  // smaller than the largest small request
  CHECK(!bad.Validate().ok());
  CHECK(CachingAllocatorOptions{}.Validate().ok());
  CHECK(allocator.Allocate(~size_t{0}).status().code() == absl::StatusCode::kInvalidArgument);
}

// Random allocate/free sequences over two streams: live blocks never overlap, always lie inside a
// live raw segment, keep the bytes written into them, and the stats match the bookkeeping.
TEST_CASE("caching allocator never hands out overlapping blocks (random sequences)",
          "[unit][engine]") {
  const uint64_t seed = testing::TestSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  FakeRawAllocator raw(160 * kMiB);
  CachingDeviceAllocator allocator(&raw);

  struct Live {
    size_t end;  // start + requested bytes rounded to 512
    size_t requested;
    uint64_t tag;
  };
  std::map<uintptr_t, Live> live;  // the interval set, keyed by start address
  uint64_t next_tag = 1;
  auto stamp = [](char* p, size_t n, uint64_t tag) {
    std::memcpy(p, &tag, std::min(n, sizeof tag));
    if (n >= 2 * sizeof tag) std::memcpy(p + n - sizeof tag, &tag, sizeof tag);
  };
  auto stamped = [](const char* p, size_t n, uint64_t tag) {
    uint64_t head = 0, tail = 0;
    std::memcpy(&head, p, std::min(n, sizeof head));
    if (n < 2 * sizeof tag) return n >= sizeof tag ? head == tag : true;
    std::memcpy(&tail, p + n - sizeof tail, sizeof tail);
    return head == tag && tail == tag;
  };
  auto random_size = [&]() -> size_t {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 6) return rng() % (kMiB + 1);             // small, 0 included
    if (kind < 9) return kMiB + 1 + rng() % (9 * kMiB);  // medium
    return 10 * kMiB + rng() % (20 * kMiB);              // large
  };

  int ooms = 0;
  int64_t attempts = 0;
  for (int step = 0; step < 4000; ++step) {
    // Around two dozen live blocks (~100 MiB): the device fills now and then, not always.
    const bool do_alloc = live.empty() || rng() % 100 < (live.size() < 24 ? 60u : 35u);
    if (do_alloc) {
      ++attempts;
      const size_t bytes = random_size();
      const StreamId stream = 1 + rng() % 2;
      auto p = allocator.Allocate(bytes, stream);
      if (!p.ok()) {
        REQUIRE(p.status().code() == absl::StatusCode::kResourceExhausted);
        ++ooms;
        continue;
      }
      const auto start = reinterpret_cast<uintptr_t>(*p);
      const size_t extent = bytes == 0 ? 512 : (bytes + 511) / 512 * 512;
      REQUIRE(start % 256 == 0);
      REQUIRE(raw.Inside(*p, extent));
      auto after = live.lower_bound(start);
      if (after != live.end()) REQUIRE(start + extent <= after->first);
      if (after != live.begin()) REQUIRE(std::prev(after)->second.end <= start);
      stamp(static_cast<char*>(*p), bytes, next_tag);
      live[start] = {start + extent, bytes, next_tag++};
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      // Another block written over this one would have broken its stamp.
      REQUIRE(
          stamped(reinterpret_cast<const char*>(it->first), it->second.requested, it->second.tag));
      allocator.Free(reinterpret_cast<void*>(it->first));
      live.erase(it);
    }
    if (step % 16 == 0 || live.empty()) {
      size_t requested = 0, rounded = 0;
      for (const auto& [start, block] : live) {
        requested += block.requested;
        rounded += block.end - start;
      }
      const auto s = allocator.stats();
      REQUIRE(s.requested_bytes == requested);
      REQUIRE(s.allocated_bytes >= rounded);
      REQUIRE(s.allocated_bytes <= s.reserved_bytes);
      REQUIRE(s.reserved_bytes == raw.used());
      REQUIRE(s.segments == raw.live_segments());
      REQUIRE(s.live_blocks == static_cast<int64_t>(live.size()));
      REQUIRE(s.cache_hits + s.cache_misses == attempts);  // every request is one or the other
      REQUIRE(s.raw_allocs - s.raw_frees == s.segments);
    }
    if (step % 500 == 499) allocator.EmptyCache();
  }
  for (const auto& [start, block] : live) {
    REQUIRE(stamped(reinterpret_cast<const char*>(start), block.requested, block.tag));
    allocator.Free(reinterpret_cast<void*>(start));
  }
  allocator.EmptyCache();
  const auto s = allocator.stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.reserved_bytes == 0);
  CHECK(raw.used() == 0);
  CHECK(raw.bad_frees == 0);
  CHECK(s.cache_hits > 0);  // the sequence is long enough that reuse must have happened
  CHECK(s.ooms == ooms);
}

}  // namespace
}  // namespace framezip::engine
