// cudaError_t → Status for CUDA-built translation units only (it includes the CUDA runtime, so only
// *_cuda.cc files may include it). Applies cuda_error_class.h: out of memory is RESOURCE_EXHAUSTED
// for the request, a sticky error is INTERNAL and marks the device unhealthy.
#pragma once

#include <cuda_runtime_api.h>

#include <string_view>

#include "common/status.h"

namespace framezip::engine {

// OK for cudaSuccess. For a non-sticky error it also clears the runtime's last-error slot, so the
// next request does not see this one's error; a sticky error cannot be cleared.
Status CudaErrorToStatus(cudaError_t err, std::string_view what);

}  // namespace framezip::engine

// Returns the status of a CUDA runtime call from the enclosing function when it failed:
//   FZ_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(...), "KV restore copy");
#define FZ_CUDA_RETURN_IF_ERROR(call, what) \
  FZ_RETURN_IF_ERROR(::framezip::engine::CudaErrorToStatus((call), (what)))
