#include "engine/core/buffer.h"

#include <cstdlib>
#include <new>

#include "engine/core/device_memory.h"

namespace framezip::engine {

void* AllocateHostAligned(size_t bytes, size_t alignment) {
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  return std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
}

void FreeHostAligned(void* ptr) { std::free(ptr); }

StatusOr<Buffer> Buffer::Allocate(Device device, size_t bytes) {
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  Buffer buffer;
  buffer.bytes_ = bytes;
  buffer.device_ = device;
  if (device.is_cpu()) {
    void* ptr = AllocateHostAligned(bytes);
    if (ptr == nullptr) {
      return absl::ResourceExhaustedError(fmt::format("host allocation of {} bytes failed", bytes));
    }
    buffer.data_ = std::shared_ptr<void>(ptr, FreeHostAligned);
    return buffer;
  }
  FZ_ASSIGN_OR_RETURN(buffer.data_, AllocateDeviceMemory(device, bytes));
  return buffer;
}

Buffer Buffer::View(void* data, size_t bytes, Device device) {
  Buffer buffer;
  buffer.data_ = std::shared_ptr<void>(data, [](void*) {});
  buffer.owning_ = false;
  buffer.bytes_ = bytes;
  buffer.device_ = device;
  return buffer;
}

Buffer Buffer::Adopt(std::shared_ptr<void> data, size_t bytes, Device device) {
  Buffer buffer;
  buffer.data_ = std::move(data);
  buffer.bytes_ = bytes;
  buffer.device_ = device;
  return buffer;
}

}  // namespace framezip::engine
