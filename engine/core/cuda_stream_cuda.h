// framezip's own CUDA stream per device, for CUDA-built translation units only (it includes the
// CUDA runtime). Every op launches on it, the step plans' and the sampler's uploads are queued on
// it, cuBLAS and cuSOLVER handles are bound to it. It is a blocking stream (cudaStreamDefault):
// what still runs on the legacy default stream (synchronous cudaMemcpy, code outside the ops) is
// ordered with it by CUDA's implicit synchronisation, so stream order alone keeps every use of a
// buffer in order, and the caching allocator may hand a freed block to the next request at once.
// A stream of its own is also what a CUDA graph can capture, which the legacy stream is not.
#pragma once

#include <cuda_runtime_api.h>

#include "common/status.h"

namespace framezip::engine {

// The stream of device `index`, created on first use (never destroyed: it outlives every op).
StatusOr<cudaStream_t> FramezipStream(int index);

// The stream of the current device (cudaGetDevice): what an op adapter launches on once it has
// made its tensors' device current. The legacy default stream (nullptr) should the stream not be
// had, which is still correct, only unordered with nothing and uncapturable.
cudaStream_t CurrentFramezipStream();

}  // namespace framezip::engine
