// FP8 section of `framezip bench gpu`: decode at batch 1 of the serving decoder with the same
// random weights held in bf16 and in FP8 E4M3 (--weight-format fp8: the projections and the head
// quantised per output channel, cuBLASLt FP8 GEMMs; runtime/weight_format.h), side by side, on the
// Qwen2-0.5B shape and the Qwen2-7B shape. Decode at batch 1 reads every weight once a token, so
// the ratio is what halving the weight bytes buys. And the sessions of 1024 tokens one memory
// budget for the decoder's weights and KV holds with each (the weights' bytes on the GPU and one
// sequence's KV pages, both measured): what FP8 buys in sessions per GPU.
#pragma once

#include <vector>

#include "bench/gpu/model_e2e.h"

namespace framezip::benchgpu {

// Empty, after saying why, on a GPU without FP8 GEMMs (before sm_90) or on a failure. quick:
// the 0.5B shape only.
std::vector<E2eRow> Fp8DecodeEndToEnd(bool quick);

}  // namespace framezip::benchgpu
