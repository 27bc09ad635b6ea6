#include "engine/core/kv_pool_sizing.h"

#include <cmath>

#include "engine/core/device_memory_info.h"

namespace framezip::engine {

StatusOr<int64_t> KvPagesForFreeBytes(size_t free_bytes, const KvPoolSizing& sizing) {
  if (!(sizing.fraction > 0.0 && sizing.fraction <= 1.0)) {  // also rejects NaN
    return InvalidArgumentError("KV pool: memory fraction {} is not in (0, 1]", sizing.fraction);
  }
  if (sizing.page_bytes == 0) return InvalidArgumentError("KV pool: page size is 0 bytes");
  if (sizing.max_pages < 0) {
    return InvalidArgumentError("KV pool: max_pages {} is negative", sizing.max_pages);
  }
  // long double holds every size_t exactly on x86-64, so the fraction is the only rounding.
  const auto budget = static_cast<size_t>(
      std::floor(static_cast<long double>(free_bytes) * static_cast<long double>(sizing.fraction)));
  const size_t usable = budget > sizing.reserve_bytes ? budget - sizing.reserve_bytes : 0;
  size_t pages = usable / sizing.page_bytes;
  if (pages == 0) {
    return ResourceExhaustedError(
        "KV pool: {} of {} free bytes is {} bytes; less the {} byte reserve that leaves no room "
        "for one {} byte page",
        sizing.fraction, free_bytes, budget, sizing.reserve_bytes, sizing.page_bytes);
  }
  if (sizing.max_pages > 0 && pages > static_cast<size_t>(sizing.max_pages)) {
    pages = static_cast<size_t>(sizing.max_pages);
  }
  return static_cast<int64_t>(pages);
}

StatusOr<int64_t> KvPagesForDevice(Device device, const KvPoolSizing& sizing) {
  FZ_ASSIGN_OR_RETURN(const DeviceMemoryInfo info, QueryDeviceMemoryInfo(device));
  return KvPagesForFreeBytes(info.free_bytes, sizing);
}

}  // namespace framezip::engine
