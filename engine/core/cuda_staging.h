// The CUDA pieces behind pinned_host_pool.h and staged_copy.h: cudaHostAlloc'd buffers and
// cudaMemcpyAsync + cudaEvent fences. Implemented by cuda_staging_cuda.cc in CUDA builds and by
// cuda_staging_none.cc (UNIMPLEMENTED) otherwise.
//
// Typical use (KV restore/offload):
//   FZ_ASSIGN_OR_RETURN(auto pinned, CreateCudaPinnedHostAllocator());
//   FZ_ASSIGN_OR_RETURN(auto engine, CreateCudaCopyEngine(Device::Cuda(0)));
//   PinnedHostPool pool(pinned.get());
//   StagedCopier copier(&pool, engine.get());
//   FZ_RETURN_IF_ERROR(copier.HostToDevice(kv_pages_dev, saved_pages, bytes, stream));
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/core/device.h"
#include "engine/core/pinned_host_pool.h"
#include "engine/core/staged_copy.h"

namespace framezip::engine {

// cudaHostAlloc(cudaHostAllocPortable) / cudaFreeHost: pinned for every device of the process.
// UNIMPLEMENTED in a CPU-only build, UNAVAILABLE without a usable GPU.
StatusOr<std::unique_ptr<RawHostAllocator>> CreateCudaPinnedHostAllocator();

// cudaMemcpyAsync on the given stream with `device` current, and fences that are
// cudaEventDisableTiming events recorded on the stream. Errors go through cuda_error_class.h.
StatusOr<std::unique_ptr<AsyncCopyEngine>> CreateCudaCopyEngine(Device device);

}  // namespace framezip::engine
