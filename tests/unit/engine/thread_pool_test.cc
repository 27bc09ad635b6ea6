// The compute pool: every index of a loop runs exactly once whatever the pool size, the grain or
// the pause between loops (workers that are still spinning and workers that went to sleep both
// pick the next loop up), workers scheduled after a loop closed stay out of it, nested loops run
// inline, callers on several threads are serialised,
// and a pool is destroyed cleanly while idle, asleep or just after a loop.
#include "engine/core/thread_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace framezip::engine {
namespace {

// Runs one loop of n on the pool and checks that each index was visited once.
void CheckCoversOnce(ThreadPool& pool, int64_t n, int64_t grain) {
  // Catch2's assertions are not thread-safe: the bodies only count, the test thread checks.
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int> empty_chunks{0};
  pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
    if (begin >= end) empty_chunks.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  CHECK(empty_chunks.load() == 0);
  int64_t wrong = 0;
  for (auto& h : hits) wrong += h.load() != 1;
  CHECK(wrong == 0);
}

TEST_CASE("a loop covers every index once for any pool size and grain", "[unit][engine]") {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    CHECK(pool.num_threads() == threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 16, 5000}) {
        CAPTURE(threads, n, grain);
        CheckCoversOnce(pool, n, grain);
      }
    }
    // An empty loop calls nothing.
    bool called = false;
    pool.ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
    CHECK(!called);
  }
}

TEST_CASE("loops back to back and after the workers fell asleep all complete", "[unit][engine]") {
  ThreadPool pool(4);
  // Back to back: the workers are still spinning on the loop counter.
  for (int i = 0; i < 2000; ++i) CheckCoversOnce(pool, 64, 1);
  // With pauses well past the spin time: the workers sleep and are woken through the condition
  // variable.
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CheckCoversOnce(pool, 256, 1);
  }
}

TEST_CASE("workers that wake after a loop closed stay out of it and join the next ones",
          "[unit][engine]") {
  // More workers than this machine has cores, and loops short enough that the caller often takes
  // every chunk before some workers are scheduled: they find the loop closed (or a later one
  // open) and must neither run a closed loop's body nor hold the caller up for good. Each loop
  // checks its own indices, so a late worker running an old loop's body shows as a double hit.
  ThreadPool pool(static_cast<int>(std::thread::hardware_concurrency()) * 4 + 2);
  for (int i = 0; i < 3000; ++i) CheckCoversOnce(pool, 1 + i % 37, 1);
  // A body that runs long enough for every worker to enter, after all those early exits.
  CheckCoversOnce(pool, 100000, 1);
}

TEST_CASE("a loop issued from inside a loop body runs inline", "[unit][engine]") {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  pool.ParallelFor(12, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.ParallelFor(10, 1, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
    }
  });
  CHECK(total.load() == 120);
}

TEST_CASE("callers on several threads are served one loop at a time", "[unit][engine]") {
  ThreadPool pool(2);
  std::atomic<int> inside{0}, most_inside{0};
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int i = 0; i < 200; ++i) {
      pool.ParallelFor(2, 1, [&](int64_t b, int64_t e) {
        // At most the pool's two participants of one loop are ever inside at once.
        const int now = inside.fetch_add(1) + 1;
        int seen = most_inside.load();
        while (now > seen && !most_inside.compare_exchange_weak(seen, now)) {
        }
        total.fetch_add(e - b);
        inside.fetch_sub(1);
      });
    }
  };
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) callers.emplace_back(caller);
  for (auto& t : callers) t.join();
  CHECK(total.load() == 4 * 200 * 2);
  CHECK(most_inside.load() <= 2);
}

// Destroys the pool on another thread; true if the destructor (which joins every worker) returned
// within 10 s, far past any wake-up: false means a worker never saw the stop. The destroying
// thread is detached, so a hung destructor fails this check instead of hanging the test.
bool DestroyedPromptly(std::unique_ptr<ThreadPool> pool) {
  auto destroyed = std::make_shared<std::promise<void>>();
  std::future<void> done = destroyed->get_future();
  std::thread([p = std::move(pool), destroyed]() mutable {
    p.reset();
    destroyed->set_value();
  }).detach();
  return done.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
}

TEST_CASE("a pool is destroyed cleanly whether its workers spin or sleep", "[unit][engine]") {
  for (int pause_ms : {0, 5}) {
    CAPTURE(pause_ms);
    auto pool = std::make_unique<ThreadPool>(3);
    CheckCoversOnce(*pool, 100, 1);
    // 0 ms: the workers are still polling for the next loop; 5 ms: they are asleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    CHECK(DestroyedPromptly(std::move(pool)));
  }
  CHECK(DestroyedPromptly(std::make_unique<ThreadPool>(4)));  // never ran a loop
}

}  // namespace
}  // namespace framezip::engine
