// UploadRegistry: the uploads in progress, so the housekeeping thread can end those whose client
// went quiet. An UploadMedia stream that sends nothing for `idle_timeout` is finished with
// DEADLINE_EXCEEDED by its `expire` callback, freeing the upload buffer it reserved; without this
// a client that opens uploads and stalls holds server memory forever.
//
// Lifetime: the upload registers when it starts reading, touches its entry on every message, and
// unregisters before it is destroyed. Unregister waits for an `expire` call in progress, so
// `expire` never runs on a destroyed upload. `expire` runs on the housekeeping thread, at most
// once per entry. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <atomic>
#include <mutex>

namespace framezip::server {

class UploadRegistry {
 public:
  using Clock = std::chrono::steady_clock;
  class Entry;

  explicit UploadRegistry(std::chrono::milliseconds idle_timeout) : idle_timeout_(idle_timeout) {}

  std::shared_ptr<Entry> Register(std::function<void()> expire);
  // A message arrived (or processing started): the upload is not idle.
  void Touch(Entry& entry);
  // The upload stops being subject to the idle timeout (e.g. all bytes received).
  void Unregister(Entry& entry);

  // Calls `expire` of every entry idle for longer than the timeout. Returns how many.
  int ExpireIdle(Clock::time_point now = Clock::now());

  size_t size() const;
  std::chrono::milliseconds idle_timeout() const { return idle_timeout_; }

 private:
  const std::chrono::milliseconds idle_timeout_;
  mutable std::mutex mu_;
  std::list<std::shared_ptr<Entry>> entries_;
};

class UploadRegistry::Entry {
 public:
  explicit Entry(std::function<void()> expire) : expire_(std::move(expire)) {}

 private:
  friend class UploadRegistry;
  // Held while `expire` runs and by Unregister; recursive because the reactor `expire` finishes
  // may be torn down (and unregister) on the same thread.
  std::recursive_mutex mu_;
  std::function<void()> expire_;  // empty once expired or unregistered
  std::atomic<int64_t> last_touch_ns_{0};
};

}  // namespace framezip::server
