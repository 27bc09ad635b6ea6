// One decode step's AttentionPack statistics on their way to the policy: each block token's
// probability in its layer's merged softmax (LowRankKv::AttendDecode) is written into one buffer
// on the decoder's device for the whole step, and when the step's layers are done it comes to the
// host in one copy and the policy reads it (LowRankKv::SettleStatistics): one copy and at most one
// wait per sequence and step, however many layers hold blocks. Handing the statistics over then
// changes nothing the step computes: a layer's statistics move only that layer's blocks'
// importance and value ranks, which the layer reads again only at the next step.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/core/tensor.h"

namespace framezip::engine::llm {

struct LowRankStatisticsInFlight {
  // A layer attended this step: its first `blocks` blocks' probabilities, one block after
  // another, start at float `offset` of `probs`.
  struct Layer {
    int layer = 0;
    size_t blocks = 0;
    size_t offset = 0;
  };
  Tensor probs;     // f32 on the decoder's device, sized at the step's first block-holding layer
  size_t used = 0;  // floats of it taken this step
  std::vector<Layer> layers;

  bool empty() const { return layers.empty(); }
};

}  // namespace framezip::engine::llm
