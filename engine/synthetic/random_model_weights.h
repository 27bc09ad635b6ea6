// A text config's random decoder: the Qwen2-0.5B shape as a model::TextConfig, and random weights
// for any config (biases and tying as the config says), for benchmarks that run a real shape
// without a checkpoint (`framezip bench engine`, `framezip bench pruning`).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/core/dtype.h"
#include "engine/model/config.h"
#include "engine/synthetic/random_decoder_weights.h"

namespace framezip::engine::runtime {

// The text config of Qwen2-0.5B (llava-onevision-qwen2-0.5b's language model).
model::TextConfig Qwen2_0_5BConfig();

// Random weights of `config`'s shape (llm::MakeRandomDecoderWeights), with its biases and tying.
StatusOr<llm::RandomDecoderWeights> MakeRandomDecoderWeights(const model::TextConfig& config,
                                                             DType dtype, uint64_t seed,
                                                             float stddev = 0.02f);

}  // namespace framezip::engine::runtime
