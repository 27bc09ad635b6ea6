// WriteKvSlots on the GPU: adapter to engine/kernels/cuda/kv_slots.cuh. The slot table is already
// in device memory in the kernel's layout (ops::KvSlot is laid out as cuda::KvSlotDesc).
#include <algorithm>
#include <cstddef>

#include "engine/kernels/cuda/kv_slots.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"
#include "engine/ops/kv_slots.h"

namespace framezip::engine::ops {

static_assert(sizeof(KvSlot) == sizeof(cuda::KvSlotDesc));
static_assert(offsetof(KvSlot, k) == offsetof(cuda::KvSlotDesc, k));
static_assert(offsetof(KvSlot, v) == offsetof(cuda::KvSlotDesc, v));
static_assert(offsetof(KvSlot, kind) == offsetof(cuda::KvSlotDesc, kind));
static_assert(static_cast<int>(KvSlotKind::kF32) == static_cast<int>(cuda::FloatKind::kF32));
static_assert(static_cast<int>(KvSlotKind::kF16) == static_cast<int>(cuda::FloatKind::kF16));

Status WriteKvSlotsCuda(Device device, const KvSlot* slots, int64_t rows, int64_t channels,
                        const float* k, const float* v) {
  ScopedCudaDevice scope(device);
  cuda::KvSlotWriteParams p;
  p.slots = reinterpret_cast<const cuda::KvSlotDesc*>(slots);
  p.k = k;
  p.v = v;
  p.rows = rows;
  p.channels = channels;
  return LaunchStatus(cuda::LaunchKvSlotWrite(p, CurrentFramezipStream()), "WriteKvSlots");
}

Status WriteKvPageRunsCuda(Device device, std::span<const KvPageRun> runs, int64_t channels,
                           const float* k, const float* v) {
  static_assert(kKvPageRunsPerLaunch == cuda::kMaxKvPageRuns);
  static_assert(sizeof(cuda::KvPageRunsParams) <= 4096, "kernel parameters over 4 KiB");
  ScopedCudaDevice scope(device);
  for (size_t first = 0; first < runs.size(); first += cuda::kMaxKvPageRuns) {
    const size_t count = std::min(runs.size() - first, static_cast<size_t>(cuda::kMaxKvPageRuns));
    cuda::KvPageRunsParams p;
    p.k = k;
    p.v = v;
    p.channels = channels;
    p.count = static_cast<int32_t>(count);
    for (size_t i = 0; i < count; ++i) {
      const KvPageRun& r = runs[first + i];
      p.runs[i] = cuda::KvPageRunDesc{
          r.k, r.v, r.src_row, r.rows,
          r.kind == KvSlotKind::kF32 ? cuda::FloatKind::kF32 : cuda::FloatKind::kF16};
    }
    FZ_RETURN_IF_ERROR(
        LaunchStatus(cuda::LaunchKvPageRuns(p, CurrentFramezipStream()), "WriteKvPageRuns"));
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
