// CommitQueue (server/commit_queue.h): one worker runs the commits in the order asked, a session
// waiting already is not queued twice, a full queue refuses without blocking and counts it, and
// WaitFor / Flush wait for what is queued. The worker is held on a gate so every state is
// reached on purpose, never by timing.
#include "server/commit_queue.h"

#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace framezip::server {
namespace {

// A commit function that records the keys it ran and blocks until opened.
class Gate {
 public:
  void Run(const std::string& key) {
    std::unique_lock lock(mu_);
    started_.push_back(key);
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    ran_.push_back(key);
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void WaitStarted(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return started_.size() >= n; });
  }
  std::vector<std::string> ran() {
    std::lock_guard lock(mu_);
    return ran_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  std::vector<std::string> started_;
  std::vector<std::string> ran_;
};

using Enqueued = CommitQueue::Enqueued;

TEST_CASE("commit queue: in order, coalesced while waiting, refused when full", "[unit][server]") {
  Gate gate;
  CommitQueue queue(2, [&](const std::string& key) { gate.Run(key); });
  CHECK(queue.Idle());
  REQUIRE(queue.Enqueue("a") == Enqueued::kQueued);
  gate.WaitStarted(1);  // "a" is in flight: the worker holds it
  CHECK(queue.Pending("a"));
  CHECK_FALSE(queue.Idle());
  // A session in flight is queued again (its commit may have read the session already).
  CHECK(queue.Enqueue("a") == Enqueued::kQueued);
  CHECK(queue.Enqueue("b") == Enqueued::kQueued);
  // Waiting already: folded into that commit.
  CHECK(queue.Enqueue("b") == Enqueued::kCoalesced);
  CHECK(queue.Enqueue("a") == Enqueued::kCoalesced);
  // Two wait: the queue is full, and says so without blocking.
  CHECK(queue.Enqueue("c") == Enqueued::kRefused);
  CommitQueue::Counters c = queue.counters();
  CHECK(c.depth == 2);
  CHECK(c.queued == 3);
  CHECK(c.coalesced == 2);
  CHECK(c.refused == 1);
  CHECK_FALSE(queue.Pending("c"));
  CHECK_FALSE(queue.WaitFor("b", Clock::now() + std::chrono::milliseconds(20)));
  gate.Open();
  queue.Flush();
  CHECK(queue.Idle());
  CHECK(gate.ran() == std::vector<std::string>{"a", "a", "b"});
  CHECK_FALSE(queue.Pending("a"));
  CHECK(queue.WaitFor("b", Clock::now()));
  c = queue.counters();
  CHECK(c.depth == 0);
  CHECK(c.committed == 3);
  // Room again.
  CHECK(queue.Enqueue("c") == Enqueued::kQueued);
  CHECK(queue.WaitFor("c", Clock::now() + std::chrono::seconds(10)));
  CHECK(gate.ran().back() == "c");
}

TEST_CASE("commit queue: stopping lets the commit in flight end and runs no other",
          "[unit][server]") {
  Gate gate;
  std::vector<std::string> ran;
  {
    CommitQueue queue(4, [&](const std::string& key) { gate.Run(key); });
    REQUIRE(queue.Enqueue("a") == Enqueued::kQueued);
    gate.WaitStarted(1);
    REQUIRE(queue.Enqueue("b") == Enqueued::kQueued);
    gate.Open();  // the destructor joins the worker once "a" ends
  }
  CHECK(gate.ran().front() == "a");
  CHECK(gate.ran().size() <= 2);
}

}  // namespace
}  // namespace framezip::server
