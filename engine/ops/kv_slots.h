// A decode step's KV write for the whole batch: row i of this step's k and v [rows, G·d] f32
// (post-RoPE) stored into slots[i], a slot of a dense (f32 or f16) page that the step plan
// assigned before the step ran (engine/llm/step_plan.h). One pass on the CPU, one launch on a GPU,
// instead of a write per sequence.
//
// The slot table lives where the step plan's upload put it: device memory for a GPU (its layout
// is the kernel's, engine/kernels/cuda/kv_slots.cuh), the plan's device-side copy on the CPU.
// Rounding: f16 is round-to-nearest-even on both devices (the host's F32ToF16), so a slot holds
// the same bits as SequenceKv::Append would have written.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/device.h"

namespace framezip::engine::ops {

enum class KvSlotKind : uint8_t { kF32 = 0, kF16 = 1 };

struct KvSlot {
  void* k = nullptr;  // the slot's key row in its page: channels elements of `kind`
  void* v = nullptr;  // the slot's value row
  KvSlotKind kind = KvSlotKind::kF16;
};

// INVALID_ARGUMENT for a negative count or a null pointer with rows > 0.
Status WriteKvSlots(Device device, const KvSlot* slots, int64_t rows, int64_t channels,
                    const float* k, const float* v);

// A prefill chunk's (or an eager decode token's) KV append into dense pages: rows
// [src_row, src_row + rows) of k and v go to consecutive slots starting at k/v of one page.
struct KvPageRun {
  void* k = nullptr;  // the run's first slot's key row in its page
  void* v = nullptr;
  int64_t src_row = 0;
  int32_t rows = 0;
  KvSlotKind kind = KvSlotKind::kF16;
};

// Every run of a layer's append in one pass: one launch on a GPU for up to kKvPageRunsPerLaunch
// runs (the run list travels in the launch's parameters, so nothing is copied first), instead of
// two per page. k, v [*, channels] f32 on `device`; the runs' pointers on `device` too.
inline constexpr int kKvPageRunsPerLaunch = 96;
Status WriteKvPageRuns(Device device, std::span<const KvPageRun> runs, int64_t channels,
                       const float* k, const float* v);

}  // namespace framezip::engine::ops
