#include "server/commit_queue.h"

#include <algorithm>

#include "common/logging.h"

namespace framezip::server {

CommitQueue::CommitQueue(size_t capacity, CommitFn commit)
    : capacity_(std::max<size_t>(capacity, 1)), commit_(std::move(commit)) {
  worker_ = std::thread([this] { Run(); });
}

CommitQueue::~CommitQueue() {
  size_t abandoned = 0;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    abandoned = queue_.size();
  }
  work_cv_.notify_all();
  worker_.join();
  if (abandoned > 0) {
    FZ_LOG_WARN("KV commit queue stopped with {} sessions' commits not run", abandoned);
  }
}

CommitQueue::Enqueued CommitQueue::Enqueue(const std::string& key) {
  {
    std::lock_guard lock(mu_);
    // Waiting already: that commit has not read the session yet, so it covers this request. (A
    // commit in flight may have read it already: queue again.)
    if (waiting_.count(key) != 0) {
      ++counters_.coalesced;
      return Enqueued::kCoalesced;
    }
    if (queue_.size() >= capacity_) {
      ++counters_.refused;
      if (!full_) {
        full_ = true;
        FZ_LOG_WARN(
            "KV commit queue full ({} sessions wait for a slow or unreachable store): further "
            "commits are deferred to each session's next commit or the drain",
            queue_.size());
      }
      return Enqueued::kRefused;
    }
    queue_.push_back(key);
    waiting_.insert(key);
    ++counters_.queued;
  }
  work_cv_.notify_one();
  return Enqueued::kQueued;
}

void CommitQueue::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) break;
    running_ = std::move(queue_.front());
    queue_.pop_front();
    waiting_.erase(running_);
    busy_ = true;
    if (full_ && queue_.size() <= capacity_ / 2) {
      full_ = false;
      FZ_LOG_INFO("KV commit queue has room again ({} sessions waiting)", queue_.size());
    }
    const std::string key = running_;
    lock.unlock();
    commit_(key);
    lock.lock();
    running_.clear();
    busy_ = false;
    ++counters_.committed;
    done_cv_.notify_all();
  }
  busy_ = false;
  running_.clear();
  done_cv_.notify_all();
}

bool CommitQueue::WaitFor(const std::string& key, Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return done_cv_.wait_until(lock, deadline, [&] {
    return stopping_ || (waiting_.count(key) == 0 && !(busy_ && running_ == key));
  });
}

void CommitQueue::Flush() {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return stopping_ || (queue_.empty() && !busy_); });
}

bool CommitQueue::Pending(const std::string& key) const {
  std::lock_guard lock(mu_);
  return waiting_.count(key) != 0 || (busy_ && running_ == key);
}

bool CommitQueue::Idle() const {
  std::lock_guard lock(mu_);
  return queue_.empty() && !busy_;
}

CommitQueue::Counters CommitQueue::counters() const {
  std::lock_guard lock(mu_);
  Counters c = counters_;
  c.depth = queue_.size();
  return c;
}

}  // namespace framezip::server
