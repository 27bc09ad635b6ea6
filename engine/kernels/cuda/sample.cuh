// The sampler kernel (ops/sample.h): one block per row of logits, in place.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/ops/sample_row_params.h"

namespace framezip::engine::cuda {

// ops/sample_row_params.h: [penalized_begin, penalized_end) index SampleParams::penalized.
using SampleRowParams = ops::SampleRowParams;

struct SampleParams {
  float* logits = nullptr;  // [rows, vocab], modified in place
  int64_t rows = 0;
  int64_t vocab = 0;
  const SampleRowParams* row_params = nullptr;  // [rows], device memory
  const int32_t* penalized = nullptr;           // distinct ids per row, device memory
  int32_t* tokens = nullptr;                    // [rows], device memory
};

// Never allocates; returns the launch error.
cudaError_t LaunchSample(const SampleParams& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
