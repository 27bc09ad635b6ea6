#include "engine/core/device.h"

#include <charconv>

#include "engine/core/cuda_runtime_probe.h"

namespace framezip::engine {

std::string DeviceName(Device device) {
  switch (device.kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return fmt::format("cuda:{}", device.index);
  }
  return "?";
}

StatusOr<Device> ParseDevice(const std::string& name) {
  if (name == "cpu") return Device::Cpu();
  if (name == "cuda") return Device::Cuda(0);
  if (name.rfind("cuda:", 0) == 0) {
    int index = -1;
    const char* begin = name.data() + 5;
    const char* end = name.data() + name.size();
    auto [ptr, ec] = std::from_chars(begin, end, index);
    if (ec == std::errc() && ptr == end && index >= 0) return Device::Cuda(index);
  }
  return absl::InvalidArgumentError(
      fmt::format("device must be 'cpu', 'cuda' or 'cuda:N', not '{}'", name));
}

bool BuiltWithCuda() { return ProbeCudaRuntime().built_with_cuda; }
int CudaDeviceCount() { return ProbeCudaRuntime().device_count; }
std::string CudaUnavailableReason() { return ProbeCudaRuntime().reason; }

std::vector<Device> AvailableDevices() {
  std::vector<Device> devices = {Device::Cpu()};
  for (int i = 0; i < CudaDeviceCount(); ++i) devices.push_back(Device::Cuda(i));
  return devices;
}

Status CheckDeviceUsable(Device device) {
  if (device.is_cpu()) return absl::OkStatus();
  const CudaRuntimeInfo& info = ProbeCudaRuntime();
  if (!info.built_with_cuda) {
    return absl::UnimplementedError(
        "this framezip binary was built without CUDA (configure with FRAMEZIP_CUDA=ON)");
  }
  if (device.index >= info.device_count) {
    return absl::UnavailableError(fmt::format("no GPU {}: {} ({} usable)", DeviceName(device),
                                              info.reason, info.device_count));
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine
