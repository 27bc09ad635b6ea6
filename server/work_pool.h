// A fixed set of worker threads running queued tasks in order: where the server does slow work
// (turn preparation: tokenizing, media decode, vision encode; upload probing) so that gRPC
// reactions never block.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace framezip::server {

// Thread-safe. The destructor runs the tasks already queued, then joins the threads.
class WorkPool {
 public:
  WorkPool(std::string name, int threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Queues `task`. Tasks must not throw (they catch what they call).
  void Post(std::function<void()> task);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace framezip::server
