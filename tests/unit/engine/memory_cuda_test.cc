// The device memory layer on a real GPU: the caching allocator over cudaMalloc and
// cudaMallocAsync, pinned staging round trips, and KV pool sizing from cudaMemGetInfo. Not device
// cases: these are the CUDA allocators, pinned host memory and the CUDA copy engine themselves,
// which the CPU does not have (their logic with fake raw allocators runs without a GPU:
// caching_device_allocator_test.cc, pinned_host_pool_test.cc, kv_pool_sizing_test.cc). Without a
// usable GPU each case prints SKIPPED and returns (CTest reports it as skipped).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <random>
#include <vector>

#include "engine/core/caching_device_allocator.h"
#include "engine/core/cuda_raw_allocator.h"
#include "engine/core/cuda_staging.h"
#include "engine/core/device_health.h"
#include "engine/core/device_memory.h"
#include "engine/core/device_memory_info.h"
#include "engine/core/kv_pool_sizing.h"
#include "engine/core/pinned_host_pool.h"
#include "engine/core/staged_copy.h"
#include "tests/testing/random.h"
#include "tests/unit/engine/cuda_test_util.h"

namespace framezip::engine {
namespace {

constexpr size_t kMiB = 1024 * 1024;

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Writes random bytes into a device block and reads them back.
void CheckRoundTrip(void* device_ptr, size_t bytes, uint64_t seed) {
  const std::vector<uint8_t> want = RandomBytes(bytes, seed);
  std::vector<uint8_t> got(bytes, 0);
  REQUIRE(CopyBytes(device_ptr, Device::Cuda(0), want.data(), Device::Cpu(), bytes).ok());
  REQUIRE(CopyBytes(got.data(), Device::Cpu(), device_ptr, Device::Cuda(0), bytes).ok());
  CHECK(got == want);
}

TEST_CASE("caching allocator over cudaMalloc reuses, empties and reports out of memory", "[cuda]") {
  if (test::SkipWithoutGpu()) return;
  const uint64_t seed = testing::TestSeed();
  INFO("seed " << seed);
  auto raw = CreateCudaRawAllocator(Device::Cuda(0), CudaRawAllocatorMode::kSynchronous);
  REQUIRE(raw.ok());
  CachingDeviceAllocator allocator(raw->get());
  auto a = allocator.Allocate(3 * kMiB + 17);
  auto b = allocator.Allocate(4096);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CheckRoundTrip(*a, 3 * kMiB + 17, seed);
  CheckRoundTrip(*b, 4096, seed + 1);
  allocator.Free(*a);
  auto c = allocator.Allocate(3 * kMiB);
  REQUIRE(c.ok());
  CHECK(*c == *a);
  CHECK(allocator.stats().raw_allocs == 2);
  CHECK(allocator.stats().cache_hits == 1);

  auto info = QueryDeviceMemoryInfo(Device::Cuda(0));
  REQUIRE(info.ok());
  CHECK(info->free_bytes <= info->total_bytes);
  auto too_big = allocator.Allocate(info->total_bytes + 1024 * kMiB);
  REQUIRE(too_big.status().code() == absl::StatusCode::kResourceExhausted);
  INFO(MessageOf(too_big.status()));
  CHECK(allocator.stats().oom_retries == 1);
  CHECK(DeviceHealthy());  // out of memory fails the request, not the device

  allocator.Free(*b);
  allocator.Free(*c);
  allocator.EmptyCache();
  CHECK(allocator.stats().reserved_bytes == 0);
}

TEST_CASE("device Buffers reuse the blocks of the process-wide caching allocator", "[cuda]") {
  if (test::SkipWithoutGpu()) return;
  if (const char* env = std::getenv("FRAMEZIP_NO_CUDA_MEMORY_CACHING");
      env != nullptr && env[0] != '\0' && std::string(env) != "0") {
    std::cout << "SKIPPED: FRAMEZIP_NO_CUDA_MEMORY_CACHING is set (every Buffer its own cudaMalloc)"
              << std::endl;
    return;
  }
  auto before = DeviceBufferAllocatorStats(Device::Cuda(0));
  REQUIRE(before.ok());
  {
    auto b = Buffer::Allocate(Device::Cuda(0), 5 * kMiB + 3);
    REQUIRE(b.ok());
    CheckRoundTrip(b->data(), 5 * kMiB + 3, testing::TestSeed());
  }
  // Freed into the cache, not to the driver: the next request is served without a cudaMalloc.
  auto again = Buffer::Allocate(Device::Cuda(0), 5 * kMiB);
  REQUIRE(again.ok());
  auto after = DeviceBufferAllocatorStats(Device::Cuda(0));
  REQUIRE(after.ok());
  CHECK(after->cache_hits >= before->cache_hits + 1);
  CHECK(after->raw_allocs <= before->raw_allocs + 1);
  CHECK(after->live_blocks == before->live_blocks + 1);
}

TEST_CASE("stream-ordered raw allocator serves a caching allocator on a stream", "[cuda]") {
  if (test::SkipWithoutGpu()) return;
  auto raw = CreateCudaRawAllocator(Device::Cuda(0), CudaRawAllocatorMode::kStreamOrdered);
  REQUIRE(raw.ok());
  CachingDeviceAllocator allocator(raw->get());
  auto p = allocator.Allocate(12 * kMiB);  // the legacy default stream (0)
  REQUIRE(p.ok());
  CheckRoundTrip(*p, 12 * kMiB, testing::TestSeed());
  allocator.Free(*p);
  allocator.EmptyCache();
  CHECK(allocator.stats().raw_frees == 1);
  CHECK(DeviceHealthy());
}

TEST_CASE("staged copies round-trip pageable host bytes through pinned buffers", "[cuda]") {
  if (test::SkipWithoutGpu()) return;
  const uint64_t seed = testing::TestSeed();
  INFO("seed " << seed);
  auto pinned = CreateCudaPinnedHostAllocator();
  auto engine = CreateCudaCopyEngine(Device::Cuda(0));
  REQUIRE(pinned.ok());
  REQUIRE(engine.ok());
  PinnedHostPool pool(pinned->get(), {kMiB, 4 * kMiB});
  StagedCopier copier(&pool, engine->get(), /*chunk_bytes=*/kMiB);
  auto device = Buffer::Allocate(Device::Cuda(0), 9 * kMiB + 333);
  REQUIRE(device.ok());
  const size_t bytes = device->bytes();
  std::vector<uint8_t> host = RandomBytes(bytes, seed);
  const std::vector<uint8_t> original = host;
  REQUIRE(copier.HostToDevice(device->data(), host.data(), bytes, /*stream=*/0).ok());
  std::fill(host.begin(), host.end(), 0);
  std::vector<uint8_t> back(bytes, 0);
  auto pending = copier.DeviceToHost(back.data(), device->data(), bytes, /*stream=*/0);
  REQUIRE(pending.ok());
  REQUIRE(pending->Wait().ok());
  CHECK(back == original);
  CHECK(pool.stats().leased == 0);
  CHECK(pool.stats().pooled_bytes <= 4 * kMiB);
}

TEST_CASE("KV pool sizing reads the device's free memory", "[cuda]") {
  if (test::SkipWithoutGpu()) return;
  auto info = QueryDeviceMemoryInfo(Device::Cuda(0));
  REQUIRE(info.ok());
  const KvPoolSizing sizing{0.5, 2 * kMiB, 256 * kMiB, 0};
  auto pages = KvPagesForDevice(Device::Cuda(0), sizing);
  REQUIRE(pages.ok());
  CHECK(*pages >= 1);
  // Free memory can only have moved a little between the two queries.
  CHECK(static_cast<size_t>(*pages) * sizing.page_bytes <= info->free_bytes / 2);
}

}  // namespace
}  // namespace framezip::engine
