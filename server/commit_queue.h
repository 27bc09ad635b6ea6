// CommitQueue: sessions' KV commits off the engine's step thread. A bounded FIFO of session keys
// with ONE worker thread that runs `commit(key)` for each, so one session's commits never overlap
// and run in the order they were asked for. A key that is already waiting is not queued twice:
// the commit, when it runs, writes everything the session did until then (coalesced).
//
// Backpressure: Enqueue never blocks. When `capacity` keys wait (a slow or unreachable store),
// it refuses, counts the refusal and logs once per full spell; the caller keeps the session
// marked as behind the store, so the session's next commit, or the drain's flush, writes what the
// refused one would have. Nothing is dropped silently: the counters below are exported as
// metrics (server/metrics.h).
//
// Thread-safe: every method, from any thread. `commit` runs on the worker only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "server/turn_types.h"

namespace framezip::server {

class CommitQueue {
 public:
  using CommitFn = std::function<void(const std::string& key)>;
  // `capacity` >= 1: keys that may wait at once.
  CommitQueue(size_t capacity, CommitFn commit);
  // Lets the commit in flight end, then stops; keys still waiting are not committed (the drain
  // flushes before this).
  ~CommitQueue();

  enum class Enqueued { kQueued, kCoalesced, kRefused };
  Enqueued Enqueue(const std::string& key);

  // Waits until `key` is neither waiting nor being committed, or `deadline`; false on timeout.
  bool WaitFor(const std::string& key, Clock::time_point deadline);
  // Waits until nothing waits and the worker is idle.
  void Flush();
  // `key` waits or is being committed.
  bool Pending(const std::string& key) const;
  // Nothing waits and no commit runs.
  bool Idle() const;

  struct Counters {
    size_t depth = 0;        // keys waiting now (the one in flight not included)
    uint64_t queued = 0;     // keys queued
    uint64_t coalesced = 0;  // requests folded into a commit already waiting
    uint64_t refused = 0;    // requests refused because the queue was full
    uint64_t committed = 0;  // commits run (whatever their outcome)
  };
  Counters counters() const;

 private:
  void Run();

  const size_t capacity_;
  const CommitFn commit_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::string> queue_;  // guarded by mu_
  std::set<std::string> waiting_;  // the keys in queue_; guarded by mu_
  std::string running_;            // the key being committed; guarded by mu_
  bool busy_ = false;              // a commit runs; guarded by mu_
  bool stopping_ = false;          // guarded by mu_
  bool full_ = false;              // in a full spell (logged); guarded by mu_
  Counters counters_;              // guarded by mu_
  std::thread worker_;
};

}  // namespace framezip::server
