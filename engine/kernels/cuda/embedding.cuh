// Embedding gather: out[i, :] = float(table[ids[i], :]). The ids are checked by the caller
// (Embedding validates them on the host); the kernel trusts them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/cuda/cast.cuh"

namespace framezip::engine::cuda {

struct EmbeddingParams {
  const void* table = nullptr;    // [vocab, hidden] of table_kind
  FloatKind table_kind = FloatKind::kF32;
  const int32_t* ids = nullptr;   // [count], device memory, each in [0, vocab)
  float* out = nullptr;           // [count, hidden]
  int64_t count = 0;
  int64_t hidden = 0;
};

// Never allocates; returns the launch error.
cudaError_t LaunchEmbedding(const EmbeddingParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
