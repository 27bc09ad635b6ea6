#include "engine/ops/kv_slots.h"

#include <cstring>

#include "engine/core/step_counters.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {
namespace {

void WriteKvSlotsCpu(const KvSlot* slots, int64_t rows, int64_t channels, const float* k,
                     const float* v) {
  for (int64_t i = 0; i < rows; ++i) {
    const KvSlot& s = slots[i];
    const float* ki = k + i * channels;
    const float* vi = v + i * channels;
    if (s.kind == KvSlotKind::kF32) {
      std::memcpy(s.k, ki, static_cast<size_t>(channels) * sizeof(float));
      std::memcpy(s.v, vi, static_cast<size_t>(channels) * sizeof(float));
    } else {
      cpu::ToF16(ki, channels, static_cast<Float16*>(s.k));
      cpu::ToF16(vi, channels, static_cast<Float16*>(s.v));
    }
  }
}

void WriteKvPageRunsCpu(std::span<const KvPageRun> runs, int64_t channels, const float* k,
                        const float* v) {
  for (const KvPageRun& r : runs) {
    const int64_t n = int64_t{r.rows} * channels;
    const float* ks = k + r.src_row * channels;
    const float* vs = v + r.src_row * channels;
    if (r.kind == KvSlotKind::kF32) {
      std::memcpy(r.k, ks, static_cast<size_t>(n) * sizeof(float));
      std::memcpy(r.v, vs, static_cast<size_t>(n) * sizeof(float));
    } else {
      cpu::ToF16(ks, n, static_cast<Float16*>(r.k));
      cpu::ToF16(vs, n, static_cast<Float16*>(r.v));
    }
  }
}

}  // namespace

Status WriteKvPageRuns(Device device, std::span<const KvPageRun> runs, int64_t channels,
                       const float* k, const float* v) {
  if (channels <= 0) return InvalidArgumentError("WriteKvPageRuns: {} channels", channels);
  if (runs.empty()) return absl::OkStatus();
  for (size_t i = 0; i < runs.size(); ++i) {
    const KvPageRun& r = runs[i];
    if (r.rows < 0 || r.src_row < 0 || (r.rows > 0 && (r.k == nullptr || r.v == nullptr))) {
      return InvalidArgumentError("WriteKvPageRuns: run {} has {} rows from row {}", i, r.rows,
                                  r.src_row);
    }
  }
  if (k == nullptr || v == nullptr) return InvalidArgumentError("WriteKvPageRuns: null rows");
  if (device.is_cpu()) {
    CountLaunches(1);  // the CPU's one pass stands for the GPU's launch
    WriteKvPageRunsCpu(runs, channels, k, v);
    return absl::OkStatus();
  }
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  return WriteKvPageRunsCuda(device, runs, channels, k, v);
}

Status WriteKvSlots(Device device, const KvSlot* slots, int64_t rows, int64_t channels,
                    const float* k, const float* v) {
  if (rows < 0 || channels <= 0) {
    return InvalidArgumentError("WriteKvSlots: {} rows of {} channels", rows, channels);
  }
  if (rows == 0) return absl::OkStatus();
  if (slots == nullptr || k == nullptr || v == nullptr) {
    return InvalidArgumentError("WriteKvSlots: null slot table or rows for {} rows", rows);
  }
  if (device.is_cpu()) {
    CountLaunches(1);  // the CPU's one pass stands for the GPU's one launch
    WriteKvSlotsCpu(slots, rows, channels, k, v);
    return absl::OkStatus();
  }
  FZ_RETURN_IF_ERROR(CheckDeviceUsable(device));
  return WriteKvSlotsCuda(device, slots, rows, channels, k, v);
}

}  // namespace framezip::engine::ops
