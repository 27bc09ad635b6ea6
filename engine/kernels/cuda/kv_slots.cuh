// A decode step's KV write: row i of k and v (f32, this step's post-RoPE rows) stored into the
// page slot the step plan assigned it, converted to the page's format (f32 or f16), for the whole
// batch in one launch. The slot table is device memory (the step plan's upload).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/cuda/cast.cuh"

namespace framezip::engine::cuda {

// The layout of ops::KvSlot (engine/ops/kv_slots.h), which the launcher reads.
struct KvSlotDesc {
  void* k = nullptr;
  void* v = nullptr;
  FloatKind kind = FloatKind::kF16;
};

struct KvSlotWriteParams {
  const KvSlotDesc* slots = nullptr;  // [rows], device memory
  const float* k = nullptr;           // [rows, channels]
  const float* v = nullptr;           // [rows, channels]
  int64_t rows = 0;
  int64_t channels = 0;
};

cudaError_t LaunchKvSlotWrite(const KvSlotWriteParams& params, cudaStream_t stream);

// Runs of consecutive rows into consecutive page slots, the run list passed by value in the
// launch's parameters (under the 4 KiB kernel-parameter limit): one block per run.
inline constexpr int kMaxKvPageRuns = 96;

struct KvPageRunDesc {
  void* k = nullptr;
  void* v = nullptr;
  int64_t src_row = 0;
  int32_t rows = 0;
  FloatKind kind = FloatKind::kF16;
};

struct KvPageRunsParams {
  const float* k = nullptr;  // [*, channels]
  const float* v = nullptr;
  int64_t channels = 0;
  int32_t count = 0;  // <= kMaxKvPageRuns
  KvPageRunDesc runs[kMaxKvPageRuns];
};

cudaError_t LaunchKvPageRuns(const KvPageRunsParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
