// Device (GPU) memory for Buffer. Implemented by device_memory_cuda.cc in CUDA builds and by
// device_memory_none.cc otherwise, so no header needs a CUDA #ifdef.
#pragma once

#include <cstddef>
#include <memory>

#include "common/status.h"
#include "engine/core/caching_device_allocator.h"
#include "engine/core/device.h"

namespace framezip::engine {

// RESOURCE_EXHAUSTED when the GPU is out of memory, UNIMPLEMENTED in a CPU-only build.
StatusOr<std::shared_ptr<void>> AllocateDeviceMemory(Device device, size_t bytes);

// The counters of the caching allocator behind device Buffers (device_memory_cuda.cc), like
// torch.cuda.memory_stats(). UNIMPLEMENTED in a CPU-only build; FAILED_PRECONDITION when
// FRAMEZIP_NO_CUDA_MEMORY_CACHING turned the cache off.
StatusOr<CachingAllocatorStats> DeviceBufferAllocatorStats(Device device);

// Copies between any two of host and device memory (synchronously). A copy that crosses between
// host and device is counted (step_counters.h) as a copy and a host synchronisation.
Status CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

// Host memory a step plan is built in for `device`: page-locked for a GPU (so its upload is truly
// asynchronous), plain 64-byte aligned memory for the CPU. RESOURCE_EXHAUSTED when it cannot be had.
StatusOr<std::shared_ptr<void>> AllocateStagingHost(Device device, size_t bytes);

// `bytes` from page-locked `src` (AllocateStagingHost's) to `dst` on `device`, queued on
// framezip's stream of the device, where the ops launch, so every later op reads what it wrote;
// no host wait; a memcpy on the CPU. Counted as one host-to-device copy. `src` must not
// change until the copy is done (RecordStepFence after it, WaitStepFence before reuse).
Status UploadAsync(void* dst, Device device, const void* src, size_t bytes);

// `bytes` from `src` on `device` to page-locked `dst` (AllocateStagingHost's), queued on
// framezip's stream after the work that wrote `src`; no host wait, so `dst` holds the bytes only
// once a fence recorded after it has passed (RecordStepFence, WaitStepFence). A memcpy on the CPU.
// Counted as one device-to-host copy.
Status DownloadAsync(void* dst, const void* src, Device device, size_t bytes);

// A step's one upload: UploadAsync, counted as a plan upload too. On the CPU a memcpy into the
// step's device-side copy, so the CPU runs exactly the code a GPU does. The step plan keeps `src`
// until a fence after the upload has passed (engine/core/staging_pool.h).
Status UploadStepPlan(void* dst, Device device, const void* src, size_t bytes);

// A point in framezip's step stream for `device`: it has passed once the device has done what was
// queued there before it (the step plans' uploads). Null, and always passed, on the CPU.
StatusOr<std::shared_ptr<void>> RecordStepFence(Device device);
// Whether `fence` has passed, without waiting (always on the CPU and for a null fence).
StatusOr<bool> StepFencePassed(Device device, const std::shared_ptr<void>& fence);
// Returns once `fence` has passed: at once (no synchronisation) when it already has, else after a
// host wait, counted as a host synchronisation.
Status WaitStepFence(Device device, const std::shared_ptr<void>& fence);

// Zero-fills `bytes` at `dst`. On a GPU the memset is queued on framezip's stream of the device,
// where every op launches, so later ops see the zeros without a host wait.
Status ZeroBytes(void* dst, Device device, size_t bytes);

}  // namespace framezip::engine
