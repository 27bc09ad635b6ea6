// How many KV pages to preallocate at startup: a configured fraction of the device's free memory,
// less a reserve for activations, workspaces and cuBLAS (ARCHITECTURE: the engine preallocates the
// KV pool once; per-request temporaries come from the caching allocator).
//
//   pages = floor((floor(free_bytes * fraction) - reserve_bytes) / page_bytes)
//
// capped at max_pages when that is set. Measure free_bytes after the weights are loaded, so the
// fraction applies to what is really left.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "engine/core/device.h"

namespace framezip::engine {

struct KvPoolSizing {
  double fraction = 0.9;     // of the free bytes, in (0, 1]
  size_t page_bytes = 0;     // one page of K and V for all layers, > 0
  size_t reserve_bytes = 0;  // kept out of the pool after the fraction is applied
  int64_t max_pages = 0;     // 0: no cap
};

// Pure. INVALID_ARGUMENT for a fraction outside (0, 1] (or NaN), page_bytes == 0 or a negative
// max_pages; RESOURCE_EXHAUSTED, naming the numbers, when not even one page fits. Otherwise >= 1.
StatusOr<int64_t> KvPagesForFreeBytes(size_t free_bytes, const KvPoolSizing& sizing);

// The same with free_bytes from QueryDeviceMemoryInfo(device) (cudaMemGetInfo): UNIMPLEMENTED in
// a CPU-only build, UNAVAILABLE without a usable GPU.
StatusOr<int64_t> KvPagesForDevice(Device device, const KvPoolSizing& sizing);

}  // namespace framezip::engine
