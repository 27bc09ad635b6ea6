// StagingPool: host buffers that uploads to one device are sent from, kept for reuse, because
// page-locked memory takes milliseconds to get (AllocateStagingHost). A buffer comes back with the
// fence after its last upload and is handed out again only once that fence has passed (usually
// long since: the step that used it read its results back), so reusing one never waits in the
// common case and never overwrites bytes a copy is still reading. On the CPU the buffers are plain
// memory and the fences null.
// Users: step plans (engine/llm/step_plan.h), one pool per KvBackend; the unplanned paged decode
// attention's descriptors (engine/ops/paged_attention_cuda.cc), one pool per device.
// Thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/core/device.h"
#include "engine/core/device_memory.h"

namespace framezip::engine {

class StagingPool {
 public:
  struct Entry {
    std::shared_ptr<void> memory;
    size_t bytes = 0;
    std::shared_ptr<void> fence;  // after the buffer's last upload (null: none in flight)
  };

  explicit StagingPool(Device device) : device_(device) {}

  // A buffer of at least `bytes`, free of any upload still reading it: a kept one whose fence
  // has passed, else a new one, else (with kKept buffers all in flight) a kept one after a wait.
  StatusOr<Entry> Take(size_t bytes) {
    Entry entry;
    {
      std::lock_guard<std::mutex> lock(mu_);
      size_t pick = free_.size();
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].bytes < bytes) continue;
        FZ_ASSIGN_OR_RETURN(const bool passed, StepFencePassed(device_, free_[i].fence));
        if (passed) {
          pick = i;
          break;
        }
        if (pick == free_.size() && free_.size() >= kKept) pick = i;  // the wait, if it comes to it
      }
      if (pick < free_.size()) {
        entry = std::move(free_[pick]);
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(pick));
      }
    }
    if (entry.memory != nullptr) {
      FZ_RETURN_IF_ERROR(WaitStepFence(device_, entry.fence));
      entry.fence.reset();
      return entry;
    }
    // Grown in powers of two from 64 KiB, so a few buffers serve every size asked.
    size_t size = 64 << 10;
    while (size < bytes) size *= 2;
    FZ_ASSIGN_OR_RETURN(entry.memory, AllocateStagingHost(device_, size));
    entry.bytes = size;
    return entry;
  }

  // Back into the pool (a few kept; more are freed), with the fence after its last upload.
  void Give(Entry entry) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < kKept) free_.push_back(std::move(entry));
  }

  // Give with the fence recorded now, after the uploads queued so far. When no fence can be
  // recorded the buffer is dropped rather than reused while a copy may still read it.
  void GiveAfterQueuedWork(Entry entry) {
    StatusOr<std::shared_ptr<void>> fence = RecordStepFence(device_);
    if (!fence.ok()) return;
    entry.fence = std::move(*fence);
    Give(std::move(entry));
  }

 private:
  // Enough for every layer's upload of an eager step to be in flight at once (the host runs ahead
  // of the device by a step).
  static constexpr size_t kKept = 64;
  Device device_;
  std::mutex mu_;
  std::vector<Entry> free_;
};

}  // namespace framezip::engine
