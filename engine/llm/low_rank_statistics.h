// One decode step's AttentionPack statistics on their way to the policy: each block token's
// probability in its layer's merged softmax (LowRankKv::AttendDecode) is downloaded into a
// page-locked host buffer without waiting, and the policy reads them when the step's layers are
// done (LowRankKv::SettleStatistics), after one wait for the device instead of one per layer.
// Applying them then changes nothing the step computes: a layer's statistics move only that
// layer's blocks' importance and value ranks, which the layer reads again only at the next step.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace framezip::engine::llm {

struct LowRankStatisticsInFlight {
  // A layer attended this step: its first `blocks` blocks' probabilities, one block after
  // another, start at float `offset` of the staging buffer.
  struct Layer {
    int layer = 0;
    size_t blocks = 0;
    size_t offset = 0;
  };
  std::shared_ptr<void> staging;  // page-locked on a GPU (AllocateStagingHost), null when idle
  size_t capacity = 0;            // floats the staging buffer holds
  size_t used = 0;                // floats taken this step
  std::vector<Layer> layers;

  bool empty() const { return layers.empty(); }
};

}  // namespace framezip::engine::llm
