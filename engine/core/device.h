// Where a tensor lives and which backend computes on it.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace framezip::engine {

enum class DeviceKind { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device Cpu() { return {DeviceKind::kCpu, 0}; }
  static Device Cuda(int index = 0) { return {DeviceKind::kCuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device&) const = default;
};

// "cpu" or "cuda:N".
std::string DeviceName(Device device);

// Parses "cpu", "cuda" or "cuda:N".
StatusOr<Device> ParseDevice(const std::string& name);

// True when this binary was compiled with the CUDA backend.
bool BuiltWithCuda();

// Number of CUDA devices this process can use: 0 when built without CUDA, when no driver is
// installed, or when no GPU is present. Never fails.
int CudaDeviceCount();

// A human-readable reason why CudaDeviceCount() is 0 ("built without CUDA", the driver's error).
std::string CudaUnavailableReason();

// Every device a test or benchmark can run on: the CPU first, then each usable GPU.
std::vector<Device> AvailableDevices();

// OK when `device` can be used; UNIMPLEMENTED for CUDA in a CPU-only build, UNAVAILABLE when the
// GPU is absent, with a message that says which.
Status CheckDeviceUsable(Device device);

}  // namespace framezip::engine
