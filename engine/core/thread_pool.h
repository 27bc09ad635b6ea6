// ThreadPool: a fixed set of worker threads that run data-parallel loops for the CPU ops.
//
// The CPU backend parallelises every heavy op (GEMM tiles, attention heads, norms over rows) with
// ParallelFor on the process-wide ComputePool(). Its size is the engine's thread count: set it
// once at startup with SetComputeThreads() (the CLI's --threads, FRAMEZIP_THREADS, or the number
// of CPUs). OpenBLAS is kept single-threaded (ops call it from inside ParallelFor), so the pool's
// size is the only knob and threads are never oversubscribed.
//
// Thread-safety: ParallelFor may be called from any thread; concurrent calls from different
// threads are serialised (one loop runs at a time). A ParallelFor issued from inside a running
// loop body runs inline on the calling worker (no nesting, no deadlock).
//
// Waiting: a decode step issues a few hundred short loops back to back, and a futex sleep and
// wake-up per loop (tens of microseconds on a virtual machine) was 8 % of a batch-1 step's CPU
// time and more of its wall time (bench/RESULTS.md). So workers poll the loop counter for up to
// 200 µs (kSpin in thread_pool.cc) before sleeping on the condition variable, and the caller polls
// the workers' count before sleeping, as OpenMP runtimes do; the pollers yield the core every few
// microseconds, so other threads of the process (the server's) still run, and an idle pool sleeps.
// The caller waits only for workers that joined the loop: one that has not been scheduled by the
// time every chunk is taken is left out of it, so a busy machine does not stall every loop.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace framezip::engine {

class ThreadPool {
 public:
  // `num_threads` participants in every loop, the calling thread included (so 1 = no workers).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n), each chunk at least `grain` long
  // (the last may be shorter), spread over the workers and the caller. Returns when every chunk
  // is done. fn must not throw.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);
  void RunChunks();
  // A worker joins the current loop unless the caller has closed it; false: it must not touch it.
  bool EnterLoop();

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serialises ParallelFor callers

  // Changes to generation_, loop_state_ and stop_ that a sleeper waits for are made with mu_
  // held (or followed by taking it) before the notify, so no wake-up is lost; spinners read the
  // atomics without it.
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  std::atomic<uint64_t> generation_{0};
  // The current loop's workers: how many have entered and not left, plus kLoopClosed once the
  // caller has run out of chunks (no worker enters after that).
  static constexpr int64_t kLoopClosed = int64_t{1} << 62;
  std::atomic<int64_t> loop_state_{kLoopClosed};
  std::atomic<bool> stop_{false};
  // The current loop (valid while a generation runs).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  int64_t num_chunks_ = 0;
  std::atomic<int64_t>* next_chunk_ = nullptr;
};

// The process-wide pool used by the CPU ops. Created on first use with the count set by
// SetComputeThreads(), else FRAMEZIP_THREADS, else std::thread::hardware_concurrency().
ThreadPool& ComputePool();

// Sets the compute thread count (>= 1). Recreates the pool; call it while no op is running
// (at startup, or between benchmark phases).
void SetComputeThreads(int num_threads);

// The current compute thread count.
int ComputeThreads();

}  // namespace framezip::engine
