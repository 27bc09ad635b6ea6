// The sampler kernel (ops/sample.h): one block per row of logits, in place.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace framezip::engine::cuda {

struct SampleRowParams {
  int greedy = 1;
  int top_k = 0;
  float temperature = 1.f;
  float top_p = 1.f;
  float repetition_penalty = 1.f;
  int penalized_begin = 0;  // [begin, end) of SampleParams::penalized
  int penalized_end = 0;
  double uniform = 0;
};

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
