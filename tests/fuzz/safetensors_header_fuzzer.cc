// libFuzzer target: the safetensors header parser must accept or reject any byte string with a
// status, never crash, hang or read outside the buffer (ASan+UBSan in the fuzz preset). When a
// header is accepted, every tensor it describes must lie inside the buffer.
#include <cstddef>
#include <cstdint>

#include "engine/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace framezip::engine::model;
  auto header = ParseSafetensorsHeader(data, size, "fuzz.safetensors");
  if (!header.ok()) return 0;
  for (const TensorInfo& t : header->tensors) {
    if (t.end < t.begin || header->data_offset + t.end > size) __builtin_trap();
    if (SafetensorsDTypeBits(t.dtype_name) == 0) __builtin_trap();
  }
  return 0;
}
