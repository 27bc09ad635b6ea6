// Type-erased memory on a device. A Buffer shares ownership of its bytes through a
// shared_ptr<void> whose deleter returns them to the allocator that made them; a view (over
// mmapped weights, say) has a no-op deleter and its owner must outlive it.
#pragma once

#include <cstddef>
#include <memory>

#include "common/status.h"
#include "engine/core/device.h"

namespace framezip::engine {

class Buffer {
 public:
  Buffer() = default;

  // Allocates `bytes` on `device`, 64-byte aligned on the host. RESOURCE_EXHAUSTED when out of
  // memory; UNIMPLEMENTED/UNAVAILABLE when the device cannot be used.
  static StatusOr<Buffer> Allocate(Device device, size_t bytes);

  // Non-owning view of memory that someone else keeps alive.
  static Buffer View(void* data, size_t bytes, Device device);

  // Takes ownership of `data` with a custom deleter (for example an munmap).
  static Buffer Adopt(std::shared_ptr<void> data, size_t bytes, Device device);

  void* data() const { return data_.get(); }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool empty() const { return data_ == nullptr; }
  // Whether this Buffer (with its copies) keeps its memory alive: false for View. Caches of
  // values derived from the contents (the AMX layout of a weight) key on owning buffers only.
  bool owns_memory() const { return owning_; }
  // The ownership this Buffer shares, for a cache to notice when the memory is gone: expired once
  // every Buffer (and Tensor) holding it is.
  std::weak_ptr<void> ownership() const { return data_; }

 private:
  std::shared_ptr<void> data_;
  bool owning_ = true;
  size_t bytes_ = 0;
  Device device_;
};

// Aligned host allocation used by Buffer::Allocate for the CPU (exposed for tests and pools).
void* AllocateHostAligned(size_t bytes, size_t alignment = 64);
void FreeHostAligned(void* ptr);

}  // namespace framezip::engine
