// Pinned staging buffers and staged async copies with host memory standing in for pinned memory
// and the device, and fences the test completes by hand: buffer reuse, fenced buffers held back,
// the pool's budget, and that copies land only when (and where) they should.
#include "engine/core/pinned_host_pool.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "engine/core/staged_copy.h"
#include "tests/testing/random.h"

namespace framezip::engine {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

class FakePinnedAllocator final : public RawHostAllocator {
 public:
  explicit FakePinnedAllocator(size_t capacity = SIZE_MAX) : capacity_(capacity) {}
  ~FakePinnedAllocator() override {
    for (auto& [ptr, bytes] : live_) std::free(ptr);
  }
  StatusOr<void*> Allocate(size_t bytes) override {
    if (used_ + bytes > capacity_) return ResourceExhaustedError("fake: no pinned memory");
    void* ptr = std::malloc(bytes);
    live_[ptr] = bytes;
    used_ += bytes;
    ++allocs;
    return ptr;
  }
  void Free(void* ptr, size_t bytes) override {
    auto it = live_.find(ptr);
    if (it == live_.end() || it->second != bytes) {
      ++bad_frees;
      return;
    }
    used_ -= bytes;
    live_.erase(it);
    std::free(ptr);
  }
  size_t used() const { return used_; }
  int allocs = 0;
  int bad_frees = 0;

 private:
  size_t capacity_;
  size_t used_ = 0;
  std::map<void*, size_t> live_;
};

// A fence the test (or a fake stream) completes; Wait() completes it through `on_wait`.
class ManualFence final : public CopyFence {
 public:
  explicit ManualFence(std::function<void()> on_wait = {}) : on_wait_(std::move(on_wait)) {}
  bool Done() override { return done; }
  Status Wait() override {
    ++waits;
    if (!done && on_wait_) on_wait_();
    done = true;
    return absl::OkStatus();
  }
  bool done = false;
  int waits = 0;

 private:
  std::function<void()> on_wait_;
};

TEST_CASE("pinned pool reuses returned buffers and rounds sizes to powers of two",
          "[unit][engine]") {
  FakePinnedAllocator raw;
  PinnedHostPool pool(&raw, {64 * kKiB, 4 * kMiB});
  void* first = nullptr;
  {
    auto lease = pool.Acquire(100 * kKiB);
    REQUIRE(lease.ok());
    CHECK(lease->capacity() == 128 * kKiB);
    first = lease->data();
  }
  auto again = pool.Acquire(70 * kKiB);  // fits the returned 128 KiB buffer
  REQUIRE(again.ok());
  CHECK(again->data() == first);
  auto tiny = pool.Acquire(1);
  REQUIRE(tiny.ok());
  CHECK(tiny->capacity() == 64 * kKiB);  // min_buffer_bytes
  CHECK(tiny->data() != first);
  const auto s = pool.stats();
  CHECK(s.hits == 1);
  CHECK(s.misses == 2);
  CHECK(s.raw_allocs == 2);
  CHECK(s.leased == 2);
  CHECK(s.pooled_bytes == 192 * kKiB);
}

TEST_CASE("pinned pool holds back a fenced buffer until its copy is done", "[unit][engine]") {
  FakePinnedAllocator raw;
  PinnedHostPool pool(&raw, {64 * kKiB, 4 * kMiB});
  auto fence = std::make_shared<ManualFence>();
  void* fenced_ptr = nullptr;
  {
    auto lease = pool.Acquire(64 * kKiB);
    REQUIRE(lease.ok());
    fenced_ptr = lease->data();
    lease->ReleaseAfter(fence);
  }
  CHECK(pool.stats().fenced == 1);
  auto other = pool.Acquire(64 * kKiB);
  REQUIRE(other.ok());
  CHECK(other->data() != fenced_ptr);  // the copy may still be reading it
  other->Reset();
  fence->done = true;
  auto reused = pool.Acquire(64 * kKiB);
  REQUIRE(reused.ok());
  // Best fit among two idle 64 KiB buffers: either is fine, but both are now eligible.
  CHECK(pool.stats().fenced == 0);
  CHECK(pool.stats().raw_allocs == 2);
  CHECK(fence->waits == 0);  // nobody blocked: there was budget for a second buffer
}

TEST_CASE("pinned pool stays within its budget, waiting on fences or overflowing",
          "[unit][engine]") {
  FakePinnedAllocator raw;
  PinnedHostPool pool(&raw, {kMiB, 2 * kMiB});

  SECTION("an idle small buffer is freed to make room for a bigger one") {
    pool.Acquire(kMiB)->Reset();
    pool.Acquire(kMiB)->Reset();  // reuses it: the pool has one 1 MiB buffer
    auto big = pool.Acquire(2 * kMiB);
    REQUIRE(big.ok());
    CHECK(pool.stats().pooled_bytes == 2 * kMiB);
    CHECK(pool.stats().raw_frees == 1);
    CHECK(raw.used() == 2 * kMiB);
  }
  SECTION("with the budget fenced, Acquire waits for the copy and reuses its buffer") {
    auto fence = std::make_shared<ManualFence>();
    auto a = pool.Acquire(2 * kMiB);
    REQUIRE(a.ok());
    void* ptr = a->data();
    a->ReleaseAfter(fence);
    auto b = pool.Acquire(2 * kMiB);
    REQUIRE(b.ok());
    CHECK(fence->waits == 1);
    CHECK(b->data() == ptr);
    CHECK(pool.stats().fence_waits == 1);
    CHECK(pool.stats().raw_allocs == 1);
  }
  SECTION("with the budget leased out, a request overflows and its buffer is not kept") {
    auto a = pool.Acquire(2 * kMiB);
    auto b = pool.Acquire(kMiB);
    REQUIRE(b.ok());
    CHECK(pool.stats().overflow_allocs == 1);
    CHECK(pool.stats().overflow_bytes == kMiB);
    auto fence = std::make_shared<ManualFence>();
    b->ReleaseAfter(fence);
    CHECK(raw.used() == 3 * kMiB);  // an overflow buffer in use by a copy is not freed yet
    fence->done = true;
    pool.Trim();
    CHECK(pool.stats().overflow_bytes == 0);
    CHECK(raw.used() == 2 * kMiB);
    auto huge = pool.Acquire(8 * kMiB);  // larger than the whole budget: overflow at once
    REQUIRE(huge.ok());
    CHECK(pool.stats().overflow_allocs == 2);
    CHECK(pool.stats().pooled_bytes == 2 * kMiB);
  }
  CHECK(raw.bad_frees == 0);
}

TEST_CASE("pinned pool reports RESOURCE_EXHAUSTED when pinned memory runs out", "[unit][engine]") {
  FakePinnedAllocator raw(3 * kMiB);
  PinnedHostPool pool(&raw, {kMiB, 64 * kMiB});
  auto held = pool.Acquire(2 * kMiB);
  pool.Acquire(kMiB)->Reset();  // idle, freed to retry the next request
  auto more = pool.Acquire(2 * kMiB);
  REQUIRE(more.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(pool.stats().raw_frees == 1);
  CHECK(MessageOf(more.status()).find("2097152 bytes") != std::string::npos);
  auto fits = pool.Acquire(kMiB);  // the retry freed the idle buffer, so this one fits
  CHECK(fits.ok());
}

// A fake device and stream: device memory is host memory; copies queue up and run in order when
// the stream is drained (by a fence's Wait or by the test), as a real stream runs them later.
class FakeStreamEngine final : public AsyncCopyEngine {
 public:
  Status CopyAsync(void* dst, const void* src, size_t bytes, CopyDirection direction,
                   StreamId) override {
    ++copies[static_cast<int>(direction)];
    max_copy = std::max(max_copy, bytes);
    queue_.push_back([dst, src, bytes] { std::memcpy(dst, src, bytes); });
    return absl::OkStatus();
  }
  StatusOr<std::shared_ptr<CopyFence>> RecordFence(StreamId) override {
    auto fence = std::make_shared<ManualFence>([this] { Drain(); });
    queue_.push_back([f = fence.get()] { f->done = true; });
    fences.push_back(fence);  // kept alive so the queued completion can write to it
    return std::shared_ptr<CopyFence>(fence);
  }
  void Drain() {
    while (!queue_.empty()) {
      auto work = std::move(queue_.front());
      queue_.pop_front();
      work();
    }
  }
  int copies[2] = {0, 0};
  size_t max_copy = 0;
  std::vector<std::shared_ptr<ManualFence>> fences;

 private:
  std::deque<std::function<void()>> queue_;
};

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST_CASE("staged copies move bytes host to device and back through a small pinned pool",
          "[unit][engine]") {
  const uint64_t seed = testing::TestSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  FakePinnedAllocator raw;
  PinnedHostPool pool(&raw, {64 * kKiB, 256 * kKiB});  // four chunks' worth: forces waiting
  FakeStreamEngine engine;
  StagedCopier copier(&pool, &engine, /*chunk_bytes=*/64 * kKiB);

  const size_t bytes = 1 * kMiB + 12345;  // 17 chunks, the last one partial
  std::vector<uint8_t> host = RandomBytes(bytes, rng);
  const std::vector<uint8_t> original = host;
  std::vector<uint8_t> device(bytes, 0);

  REQUIRE(copier.HostToDevice(device.data(), host.data(), bytes, /*stream=*/7).ok());
  std::fill(host.begin(), host.end(), 0xAB);  // the source may be reused as soon as it returns
  engine.Drain();
  CHECK(device == original);
  CHECK(engine.copies[0] == 17);
  CHECK(engine.max_copy == 64 * kKiB);
  CHECK(pool.stats().pooled_bytes <= 256 * kKiB);
  CHECK(pool.stats().fence_waits > 0);  // the pool was too small to stage it all at once
  CHECK(pool.stats().overflow_allocs == 0);

  std::vector<uint8_t> back(bytes, 0);
  auto pending = copier.DeviceToHost(back.data(), device.data(), bytes, /*stream=*/7);
  REQUIRE(pending.ok());
  CHECK(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0; }));  // not yet
  CHECK_FALSE(pending->Ready());
  REQUIRE(pending->Wait().ok());  // drains the fake stream, then copies out of staging
  CHECK(back == original);
  CHECK(pending->Wait().ok());  // idempotent
  CHECK(pool.stats().leased == 0);
}

TEST_CASE("an abandoned device-to-host copy never writes its destination", "[unit][engine]") {
  FakePinnedAllocator raw;
  PinnedHostPool pool(&raw, {64 * kKiB, kMiB});
  FakeStreamEngine engine;
  StagedCopier copier(&pool, &engine, 64 * kKiB);
  std::vector<uint8_t> device(100 * kKiB, 0x5A);
  std::vector<uint8_t> host(device.size(), 0);
  {
    auto pending = copier.DeviceToHost(host.data(), device.data(), device.size(), 0);
    REQUIRE(pending.ok());
  }
  CHECK(pool.stats().leased == 0);
  CHECK(pool.stats().fenced == 2);  // the staging buffers wait for the device, not for us
  engine.Drain();
  CHECK(std::all_of(host.begin(), host.end(), [](uint8_t b) { return b == 0; }));
  auto next = pool.Acquire(64 * kKiB);
  REQUIRE(next.ok());
  CHECK(pool.stats().fenced == 0);
}

}  // namespace
}  // namespace framezip::engine
