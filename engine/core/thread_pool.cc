#include "engine/core/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

namespace framezip::engine {
namespace {

// True on a thread that is running a loop body: nested ParallelFor calls run inline there.
thread_local bool t_in_loop = false;

int DefaultThreadCount() {
  if (const char* env = std::getenv("FRAMEZIP_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// How long a worker (or the caller) polls before sleeping: longer than the serial work between two
// loops of a decode step, short enough that an idle pool stops burning CPU at once.
constexpr auto kSpin = std::chrono::microseconds(200);

// Polls done() with pause instructions until it is true or kSpin has passed; true if it became
// true. Every 16 polls (a few microseconds) the thread yields: where the process has more runnable
// threads than cores (the server's gRPC and scheduler threads beside the pool on 2 cores), a
// spinner that never yields took the core they needed and turn-2 TTFT went from 3 to 12 ms; with
// nothing else runnable, the yield returns at once. The clock is read at each yield.
template <typename Done>
bool SpinUntil(const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (done()) return true;
      _mm_pause();
    }
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

std::mutex g_pool_mu;
std::unique_ptr<ThreadPool> g_pool;
int g_threads = 0;  // 0 = not chosen yet

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  const bool was_in_loop = t_in_loop;
  t_in_loop = true;
  for (;;) {
    const int64_t c = next_chunk_->fetch_add(1, std::memory_order_relaxed);
    if (c >= num_chunks_) break;
    const int64_t begin = c * chunk_;
    (*fn_)(begin, std::min(n_, begin + chunk_));
  }
  t_in_loop = was_in_loop;
}

void ThreadPool::WorkerLoop(int /*index*/) {
  uint64_t seen = 0;
  for (;;) {
    const auto started = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!SpinUntil(started)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, started);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    if (!EnterLoop()) continue;  // it closed before this worker woke: its chunks are all done
    RunChunks();
    if (loop_state_.fetch_sub(1, std::memory_order_acq_rel) == (kLoopClosed | 1)) {
      // The caller may be asleep on done_cv_: taking mu_ orders this after its predicate check.
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

bool ThreadPool::EnterLoop() {
  int64_t state = loop_state_.load(std::memory_order_acquire);
  while ((state & kLoopClosed) == 0) {
    if (loop_state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return true;
    }
  }
  return false;
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (num_threads_ == 1 || t_in_loop || n <= grain) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  // Several chunks per thread so uneven work (causal attention rows) still balances.
  const int64_t target_chunks = static_cast<int64_t>(num_threads_) * 8;
  const int64_t chunk = std::max(grain, (n + target_chunks - 1) / target_chunks);
  std::atomic<int64_t> next{0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    num_chunks_ = (n + chunk - 1) / chunk;
    next_chunk_ = &next;
    // Opens the loop and publishes its fields to the workers that enter it (EnterLoop's acquire).
    loop_state_.store(0, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  RunChunks();
  // Every chunk is claimed, and the caller ran what no worker took. Closing the loop keeps out the
  // workers that have not entered it yet, so the caller waits only for those still running a
  // chunk: a worker the OS has not scheduled (other processes on the cores, a container's CPU
  // quota) no longer holds every loop up for a scheduling slice. Measured on 2 cores beside two
  // busy processes, that wait made the whole engine 13x slower (bench/RESULTS.md).
  loop_state_.fetch_or(kLoopClosed, std::memory_order_acq_rel);
  const auto done = [&] {
    return (loop_state_.load(std::memory_order_acquire) & ~kLoopClosed) == 0;
  };
  if (!SpinUntil(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, done);
  }
  fn_ = nullptr;
  next_chunk_ = nullptr;
}

ThreadPool& ComputePool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) {
    if (g_threads == 0) g_threads = DefaultThreadCount();
    g_pool = std::make_unique<ThreadPool>(g_threads);
  }
  return *g_pool;
}

void SetComputeThreads(int num_threads) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_threads = std::max(1, num_threads);
  if (!g_pool || g_pool->num_threads() != g_threads)
    g_pool = std::make_unique<ThreadPool>(g_threads);
}

int ComputeThreads() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  return g_threads == 0 ? DefaultThreadCount() : g_threads;
}

}  // namespace framezip::engine
