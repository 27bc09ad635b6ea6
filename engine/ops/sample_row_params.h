// One row's sampling parameters as the sampling kernel reads them from device memory
// (engine/kernels/cuda/sample.cuh), and as a decode step's plan lays them out in its upload
// (llm/step_plan.h): a plain struct, the same bytes on the host and the device.
#pragma once

namespace framezip::engine::ops {

struct SampleRowParams {
  int greedy = 1;
  int top_k = 0;
  float temperature = 1.f;
  float top_p = 1.f;
  float repetition_penalty = 1.f;
  int penalized_begin = 0;  // [begin, end) of the penalised ids that go with the rows
  int penalized_end = 0;
  double uniform = 0;
};

}  // namespace framezip::engine::ops
