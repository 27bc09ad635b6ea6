// CPU-only builds: no device to ask.
#include "engine/core/device_memory_info.h"

namespace framezip::engine {

StatusOr<DeviceMemoryInfo> QueryDeviceMemoryInfo(Device device) {
  return UnimplementedError("no memory information for {}: built without CUDA", DeviceName(device));
}

}  // namespace framezip::engine
