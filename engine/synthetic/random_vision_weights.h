// Random vision weights built in memory, for benchmarks (`framezip bench engine`) and tests: no
// checkpoint needed. Values are uniform with the given standard deviation (LayerNorm weights 1,
// biases and LayerNorm betas small), stored in `dtype` (f32 / f16 / bf16) like a real checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/model/config.h"
#include "engine/vision/vision_weights.h"

namespace framezip::engine::vision {

// Every tensor BindLlavaVisionWeights reads, under its canonical name, with the shapes `config`
// implies (all config.vision.num_hidden_layers layers). Deterministic for a given seed.
// INVALID_ARGUMENT for a non-float dtype; RESOURCE_EXHAUSTED when memory runs out.
StatusOr<std::map<std::string, Tensor>> RandomVisionCheckpoint(const model::LlavaConfig& config,
                                                               DType dtype, uint64_t seed,
                                                               float stddev = 0.02f);

// RandomVisionCheckpoint bound with BindLlavaVisionWeights (the tensors own their memory).
StatusOr<LlavaVisionWeights> RandomLlavaVisionWeights(const model::LlavaConfig& config, DType dtype,
                                                      uint64_t seed, float stddev = 0.02f);

// A lookup over a name -> tensor map (NOT_FOUND naming the missing tensor).
WeightLookup MapLookup(const std::map<std::string, Tensor>& tensors);

}  // namespace framezip::engine::vision
