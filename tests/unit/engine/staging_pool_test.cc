// StagingPool on the CPU, where buffers are plain memory and fences null (always passed): sizes
// round up to powers of two from 64 KiB, a returned buffer is reused for any size it holds, and a
// larger request gets a larger buffer. (The fence logic, waiting only when every kept buffer is
// still being read, needs a GPU: the step plans and eager decode steps of the [cuda] tests use it.)
#include "engine/core/staging_pool.h"

#include <catch2/catch.hpp>
#include <cstring>

namespace framezip::engine {
namespace {

TEST_CASE("StagingPool rounds sizes up and reuses returned buffers", "[unit][memory]") {
  StagingPool pool(Device::Cpu());
  StatusOr<StagingPool::Entry> small = pool.Take(100);
  REQUIRE(small.ok());
  CHECK(small->bytes == (64u << 10));
  std::memset(small->memory.get(), 0x5a, small->bytes);  // the whole buffer is ours
  void* const first = small->memory.get();
  pool.GiveAfterQueuedWork(*std::move(small));

  StatusOr<StagingPool::Entry> again = pool.Take(64u << 10);
  REQUIRE(again.ok());
  CHECK(again->memory.get() == first);  // the returned buffer, not a new one

  StatusOr<StagingPool::Entry> big = pool.Take((64u << 10) + 1);
  REQUIRE(big.ok());
  CHECK(big->bytes == (128u << 10));
  CHECK(big->memory.get() != first);
  pool.Give(*std::move(big));
  pool.Give(*std::move(again));

  // Either kept buffer serves a small request; the larger one serves a request only it holds.
  StatusOr<StagingPool::Entry> large = pool.Take(100u << 10);
  REQUIRE(large.ok());
  CHECK(large->bytes == (128u << 10));
}

}  // namespace
}  // namespace framezip::engine
