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

}  // namespace framezip::engine::cuda
