// Dynamic-LLaVA predictors with random weights of a chosen shape: for benchmarks at shapes no
// trained checkpoint has (Qwen2-0.5B's hidden 896) and for device comparisons in tests. The values
// are drawn as torch's default nn.Linear / nn.LayerNorm initialisation would scale them (weights
// ~ N(0, 1/in), small biases, LayerNorm gains near 1), so activations stay O(1).
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "engine/compress/dynamic_llava_predictors.h"
#include "engine/core/device.h"

namespace framezip::engine::compress {

struct RandomPredictorOptions {
  int64_t hidden = 128;  // the decoder's hidden size
  int64_t width = 128;   // W
  int64_t heads = 4;
  int blocks = 2;
  int64_t mlp_ratio = 4;
  uint64_t seed = 0;
  Device device = Device::Cpu();  // where the weights are placed
};

StatusOr<std::shared_ptr<const DynamicLlavaPredictors>> MakeRandomPredictors(
    const RandomPredictorOptions& options);

}  // namespace framezip::engine::compress
