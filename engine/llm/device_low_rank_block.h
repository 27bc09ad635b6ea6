// A GPU decoder's copy of an AttentionPack block (kv/low_rank_block.h): the factors in their stored
// formats, the token positions and the value ranks in device memory, viewed as
// ops::LowRankBlockView for the fused decompress-and-attend kernel (ops/low_rank_cuda.h).
//
// The host block stays the source of truth (the page codec and the KV store read it there, and
// the policy updates its ranks), so a copy is made once per block and only the ranks are sent
// again, at the steps where the policy changed them. A copy knows which host block it was made
// from (the address of the key factor's bytes, which a moved block keeps, with its token count,
// ranks and first position), so a sequence whose blocks were replaced or restored gets fresh
// copies.
#pragma once

#include <vector>

#include "common/status.h"
#include "engine/core/device.h"
#include "engine/core/tensor.h"
#include "engine/kv/low_rank_block.h"
#include "engine/ops/low_rank.h"

namespace framezip::engine::llm {

class DeviceLowRankBlock {
 public:
  // Copies `block`'s factors, positions and ranks to `device` (a GPU).
  static StatusOr<DeviceLowRankBlock> Upload(const kv::LowRankBlock& block, Device device);

  // Whether this is the copy of `block` (made from it and of its size).
  bool Mirrors(const kv::LowRankBlock& block) const;

  // Sends the block's current value ranks when they differ from those last sent (the policy
  // changes them as importance moves, at its regroup steps).
  Status UpdateRanks(const kv::LowRankBlock& block);

  // The view of the device memory, for ops::LowRankBlockAttendCuda.
  const ops::LowRankBlockView& view() const { return view_; }

 private:
  struct DeviceFactor {
    Tensor values;  // f16 elements or packed int4 codes, as bytes
    Tensor scales;  // int4: f16 scales, as bytes (undefined for f16)
  };
  static StatusOr<DeviceFactor> UploadFactor(const ops::FactorView& host, Device device,
                                             ops::FactorView& device_view);

  const void* source_ = nullptr;
  int64_t tokens_ = 0;
  int key_rank_ = 0, value_rank_ = 0;
  int32_t first_position_ = 0;
  DeviceFactor key_us_, key_vt_, value_us_, value_vt_;
  Tensor positions_, ranks_;
  std::vector<uint16_t> sent_ranks_;  // what ranks_ holds
  ops::LowRankBlockView view_;
};

// The device copies of one sequence's blocks, per layer, kept in step with its host blocks.
class DeviceLowRankBlocks {
 public:
  // The copies of `blocks` (layer `layer`), made for the blocks that have none, with their ranks
  // sent. Valid until the next call for this layer.
  StatusOr<std::span<const DeviceLowRankBlock>> Sync(int layer,
                                                     std::span<const kv::LowRankBlock> blocks,
                                                     Device device);

 private:
  std::vector<std::vector<DeviceLowRankBlock>> layers_;
};

}  // namespace framezip::engine::llm
