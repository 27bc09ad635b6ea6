// SampleTokens: the next token of each row of logits, on the logits' own device, exactly the steps
// of llm::Sampler (llm/sampler.h: repetition penalty, greedy argmax or temperature, top-k, top-p,
// then a draw from what is left). The random draw comes from the caller as a uniform number, so a
// GPU decode step copies B token ids to the host instead of B·V logits, and the CPU and GPU give
// the same token for the same draw (up to rounding at a boundary of the distribution).
//
//   r = uniform · Σ_kept exp(s − max);  token = first kept i (in token order) with
//   Σ_{kept j ≤ i} exp(s_j − max) > r;  the last kept token if rounding leaves none.
//
// top_p keeps the tokens whose key is at or above the smallest logit t with
// P(logit <= t) > 1 − top_p (the most likely token always stays): llm::Sampler's "sort ascending,
// drop while the cumulative probability is <= 1 − top_p" for distinct logits. Tied logits at that
// boundary are kept or dropped together (the sort keeps some of them, by index).
//
// The logits are modified in place as Sampler::Sample modifies them (penalty, temperature, −inf
// for what top-k/top-p removed). CPU: SampleRowCpu per row. CUDA: one block per row, the k-th
// largest logit and the top-p boundary found by bisection over the logits' ordered bit patterns
// (no sort, no workspace), the draw by a block-wide scan in token order; 4·B·(2 + pen) bytes go to
// the device per call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/sample_row_params.h"

namespace framezip::engine::ops {

struct RowSampling {
  bool greedy = true;
  float temperature = 1.0f;  // > 0
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // (0, 1]; 1 = off
  float repetition_penalty = 1.0f;
  // Token ids the repetition penalty applies to, each once (the sequence's distinct tokens;
  // ids outside [0, V) are ignored, as HF does).
  std::vector<int32_t> penalized;
  double uniform = 0;  // the draw, in [0, 1); unused when greedy
};

// logits [B, V] f32 on any device; rows.size() == tokens.size() == B. INVALID_ARGUMENT naming the
// row and field for a bad parameter or shape.
Status SampleTokens(Tensor& logits, std::span<const RowSampling> rows, std::span<int32_t> tokens);

// The rows in the form the sampling kernel reads (sample_row_params.h): one SampleRowParams per
// row, and the penalised ids of the rows whose repetition_penalty is not 1, back to back.
struct PackedSampling {
  std::vector<SampleRowParams> rows;
  std::vector<int32_t> penalized;
};
PackedSampling PackSampling(std::span<const RowSampling> rows);

// Where a decode step's plan put PackSampling(rows) on the logits' device, with room for the
// tokens (llm/step_plan.h).
struct PlannedSampling {
  const SampleRowParams* rows = nullptr;
  const int32_t* penalized = nullptr;
  int32_t* tokens = nullptr;  // [rows]
};

// SampleTokens whose parameters went to the device with the step's plan: on a GPU one launch and
// the read-back of the ids, no upload of its own. `rows` are checked as SampleTokens checks them,
// and `planned` must be their packed copy: the CPU, like a GPU, samples from that copy (so its
// tests read back what a plan laid out) and writes the tokens to planned.tokens as well.
Status SampleTokensPlanned(Tensor& logits, std::span<const RowSampling> rows,
                           const PlannedSampling& planned, std::span<int32_t> tokens);

// One row on the CPU (what SampleTokens runs per row there, and what llm::Sampler calls).
// `row` must be valid (SampleTokens checks it).
int32_t SampleRowCpu(std::span<float> logits, const RowSampling& row);

}  // namespace framezip::engine::ops
