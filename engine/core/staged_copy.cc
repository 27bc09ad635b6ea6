#include "engine/core/staged_copy.h"

#include <algorithm>
#include <cstring>

namespace framezip::engine {

PendingHostCopy& PendingHostCopy::operator=(PendingHostCopy&& other) {
  if (this != &other) {
    Abandon();
    chunks_ = std::move(other.chunks_);
    fence_ = std::move(other.fence_);
    other.chunks_.clear();
  }
  return *this;
}

PendingHostCopy::~PendingHostCopy() { Abandon(); }

void PendingHostCopy::Abandon() {
  for (Chunk& chunk : chunks_) chunk.staging.ReleaseAfter(fence_);
  chunks_.clear();
  fence_.reset();
}

bool PendingHostCopy::Ready() const { return fence_ == nullptr || fence_->Done(); }

Status PendingHostCopy::Wait() {
  if (chunks_.empty()) return absl::OkStatus();
  if (fence_ != nullptr) {
    const Status waited = fence_->Wait();
    if (!waited.ok()) {
      Abandon();  // the bytes will never be right; the buffers go back once the device lets go
      return waited;
    }
  }
  for (Chunk& chunk : chunks_) {
    std::memcpy(chunk.host_dst, chunk.staging.data(), chunk.bytes);
    chunk.staging.Reset();
  }
  chunks_.clear();
  fence_.reset();
  return absl::OkStatus();
}

StagedCopier::StagedCopier(PinnedHostPool* pool, AsyncCopyEngine* engine, size_t chunk_bytes)
    : pool_(pool), engine_(engine), chunk_bytes_(chunk_bytes) {
  FZ_CHECK(pool_ != nullptr && engine_ != nullptr && chunk_bytes_ > 0);
}

Status StagedCopier::HostToDevice(void* device_dst, const void* host_src, size_t bytes,
                                  StreamId stream) {
  auto* dst = static_cast<char*>(device_dst);
  const auto* src = static_cast<const char*>(host_src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(chunk_bytes_, bytes - done);
    // Acquire may wait for an earlier chunk's fence: that is the pipelining through a bounded pool.
    FZ_ASSIGN_OR_RETURN(PinnedHostPool::Lease staging, pool_->Acquire(n));
    std::memcpy(staging.data(), src + done, n);
    FZ_RETURN_IF_ERROR(
        engine_->CopyAsync(dst + done, staging.data(), n, CopyDirection::kHostToDevice, stream));
    FZ_ASSIGN_OR_RETURN(std::shared_ptr<CopyFence> fence, engine_->RecordFence(stream));
    staging.ReleaseAfter(std::move(fence));
    done += n;
  }
  return absl::OkStatus();
}

StatusOr<PendingHostCopy> StagedCopier::DeviceToHost(void* host_dst, const void* device_src,
                                                     size_t bytes, StreamId stream) {
  PendingHostCopy pending;
  auto* dst = static_cast<char*>(host_dst);
  const auto* src = static_cast<const char*>(device_src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(chunk_bytes_, bytes - done);
    FZ_ASSIGN_OR_RETURN(PinnedHostPool::Lease staging, pool_->Acquire(n));
    const Status copied =
        engine_->CopyAsync(staging.data(), src + done, n, CopyDirection::kDeviceToHost, stream);
    pending.chunks_.push_back({std::move(staging), dst + done, n});
    if (!copied.ok()) {
      // Earlier chunks may still be in flight: `pending` hands their buffers back after a fence.
      StatusOr<std::shared_ptr<CopyFence>> fence = engine_->RecordFence(stream);
      if (fence.ok()) pending.fence_ = *std::move(fence);
      return copied;
    }
    done += n;
  }
  if (!pending.chunks_.empty()) {
    FZ_ASSIGN_OR_RETURN(pending.fence_, engine_->RecordFence(stream));
  }
  return pending;
}

}  // namespace framezip::engine
