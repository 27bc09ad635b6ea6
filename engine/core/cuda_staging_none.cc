// CPU-only builds: no pinned memory, no device copies.
#include "engine/core/cuda_staging.h"

namespace framezip::engine {

StatusOr<std::unique_ptr<RawHostAllocator>> CreateCudaPinnedHostAllocator() {
  return UnimplementedError("pinned host memory needs CUDA: built without CUDA");
}

StatusOr<std::unique_ptr<AsyncCopyEngine>> CreateCudaCopyEngine(Device device) {
  return UnimplementedError("cannot copy to {}: built without CUDA", DeviceName(device));
}

}  // namespace framezip::engine
