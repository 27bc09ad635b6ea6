// CPU-only builds: there is no device memory to hand out.
#include "engine/core/cuda_raw_allocator.h"

namespace framezip::engine {

StatusOr<std::unique_ptr<RawDeviceAllocator>> CreateCudaRawAllocator(Device device,
                                                                     CudaRawAllocatorMode) {
  return UnimplementedError("cannot allocate on {}: built without CUDA", DeviceName(device));
}

}  // namespace framezip::engine
