// KvBackend::StagingCache: the host buffers step plans are uploaded from (step_plan.h), kept for
// reuse, because page-locked memory takes milliseconds to get.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/core/device.h"
#include "engine/core/device_memory.h"
#include "engine/llm/kv_backend.h"

namespace framezip::engine::llm {

// Free upload buffers with the fence after their last upload: a buffer is written again only
// once the device has read it (usually long since: the step that used it read its results back).
class KvBackend::StagingCache {
 public:
  struct Entry {
    std::shared_ptr<void> memory;
    size_t bytes = 0;
    std::shared_ptr<void> fence;
  };

  explicit StagingCache(Device device) : device_(device) {}

  // A buffer of at least `bytes`, free of any upload still reading it.
  StatusOr<Entry> Take(size_t bytes) {
    Entry entry;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].bytes >= bytes) {
          entry = std::move(free_[i]);
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
    if (entry.memory != nullptr) {
      FZ_RETURN_IF_ERROR(WaitStepFence(device_, entry.fence));
      entry.fence.reset();
      return entry;
    }
    // Grown in powers of two from 64 KiB, so a few buffers serve every step.
    size_t size = 64 << 10;
    while (size < bytes) size *= 2;
    FZ_ASSIGN_OR_RETURN(entry.memory, AllocateStagingHost(device_, size));
    entry.bytes = size;
    return entry;
  }

  // Back into the cache (a few kept; more are freed), with the fence after its last upload.
  void Give(Entry entry) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < 4) free_.push_back(std::move(entry));
  }

 private:
  Device device_;
  std::mutex mu_;
  std::vector<Entry> free_;
};

}  // namespace framezip::engine::llm
