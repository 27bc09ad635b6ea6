// Asynchronous host<->device copies for KV restore (host → device) and offload (device → host)
// through pinned staging buffers (pinned_host_pool.h), in chunks so that large transfers pipeline
// through a bounded amount of pinned memory.
//
// The host side may be ordinary pageable memory (a std::vector, an mmapped file): the copier moves
// it through pinned buffers, because cudaMemcpyAsync from pageable memory is synchronous. The
// device side must stay valid until the copy completes in `stream` order.
//
// The CUDA operations (cudaMemcpyAsync, cudaEventRecord) are injected as an AsyncCopyEngine
// (cuda_staging.h makes the CUDA one), so the chunking, staging and completion logic is tested
// with host memory. Thread-safety: a StagedCopier may be used from several threads (the pool and
// engine are thread-safe); a PendingHostCopy belongs to one thread.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/core/pinned_host_pool.h"
#include "engine/core/raw_device_allocator.h"

namespace framezip::engine {

enum class CopyDirection { kHostToDevice, kDeviceToHost };

// The two CUDA calls a staged copy needs.
class AsyncCopyEngine {
 public:
  virtual ~AsyncCopyEngine() = default;
  // Enqueues a copy of `bytes` on `stream` (cudaMemcpyAsync); the host side is pinned.
  virtual Status CopyAsync(void* dst, const void* src, size_t bytes, CopyDirection direction,
                           StreamId stream) = 0;
  // A fence that completes when everything enqueued on `stream` so far has (a cudaEvent).
  virtual StatusOr<std::shared_ptr<CopyFence>> RecordFence(StreamId stream) = 0;
};

// A device → host copy in flight. Wait() blocks until the device has written the staging buffers
// and then copies them into the host destination; before that the destination is untouched.
// Destroying it without Wait() abandons the copy: the destination is never written and the
// staging buffers go back to the pool once the device is done with them.
class PendingHostCopy {
 public:
  PendingHostCopy() = default;
  PendingHostCopy(PendingHostCopy&&) = default;
  PendingHostCopy& operator=(PendingHostCopy&&);
  ~PendingHostCopy();

  // True when Wait() would not block.
  bool Ready() const;
  // Waits, fills the destination, returns the staging buffers. Idempotent: later calls return OK.
  Status Wait();

 private:
  friend class StagedCopier;
  struct Chunk {
    PinnedHostPool::Lease staging;
    void* host_dst = nullptr;
    size_t bytes = 0;
  };
  void Abandon();
  std::vector<Chunk> chunks_;
  std::shared_ptr<CopyFence> fence_;  // recorded after the last chunk's copy
};

class StagedCopier {
 public:
  // `pool` and `engine` must outlive the copier and its PendingHostCopy objects. `chunk_bytes`
  // is the most one staging buffer carries (it should be <= the pool's max_pooled_bytes / 2, so
  // the next chunk can be staged while the previous one is copied).
  StagedCopier(PinnedHostPool* pool, AsyncCopyEngine* engine, size_t chunk_bytes = 4u << 20);

  // Enqueues host → device. When it returns, `host_src` may be reused or freed (its bytes are in
  // staging buffers); the device bytes are written in `stream` order, so later work on `stream`
  // sees them. The staging buffers return to the pool when their copies are done.
  Status HostToDevice(void* device_dst, const void* host_src, size_t bytes, StreamId stream);

  // Enqueues device → host; `host_dst` is written by PendingHostCopy::Wait() and must stay valid
  // until then.
  StatusOr<PendingHostCopy> DeviceToHost(void* host_dst, const void* device_src, size_t bytes,
                                         StreamId stream);

 private:
  PinnedHostPool* const pool_;
  AsyncCopyEngine* const engine_;
  const size_t chunk_bytes_;
};

}  // namespace framezip::engine
