#include "engine/llm/device_low_rank_block.h"

#include "engine/core/device_memory.h"

namespace framezip::engine::llm {
namespace {

// `bytes` of host memory into a fresh u8 tensor on `device` (one byte at least, so a tensor
// always exists to point into).
StatusOr<Tensor> BytesOn(const void* host, size_t bytes, Device device) {
  FZ_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))},
                                              DType::kU8, device));
  if (bytes > 0) FZ_RETURN_IF_ERROR(CopyBytes(t.raw_data(), device, host, Device::Cpu(), bytes));
  return t;
}

// The address that names a host factor's bytes (a moved block keeps it).
const void* FactorBytes(const ops::FactorView& v) {
  return v.format == ops::FactorView::Format::kInt4 ? static_cast<const void*>(v.packed)
                                                    : static_cast<const void*>(v.f16);
}

}  // namespace

StatusOr<DeviceLowRankBlock::DeviceFactor> DeviceLowRankBlock::UploadFactor(
    const ops::FactorView& host, Device device, ops::FactorView& device_view) {
  const size_t n = static_cast<size_t>(host.rows * host.cols);
  DeviceFactor f;
  device_view = host;
  switch (host.format) {
    case ops::FactorView::Format::kF16: {
      FZ_ASSIGN_OR_RETURN(f.values, BytesOn(host.f16, n * sizeof(Float16), device));
      device_view.f16 = static_cast<const Float16*>(f.values.raw_data());
      break;
    }
    case ops::FactorView::Format::kInt4: {
      const size_t groups =
          static_cast<size_t>((host.rows + host.group_rows - 1) / host.group_rows);
      FZ_ASSIGN_OR_RETURN(f.values, BytesOn(host.packed, (n + 1) / 2, device));
      FZ_ASSIGN_OR_RETURN(
          f.scales,
          BytesOn(host.scales, groups * static_cast<size_t>(host.cols) * sizeof(Float16), device));
      device_view.packed = static_cast<const uint8_t*>(f.values.raw_data());
      device_view.scales = static_cast<const Float16*>(f.scales.raw_data());
      break;
    }
    case ops::FactorView::Format::kF32: {
      FZ_ASSIGN_OR_RETURN(f.values, BytesOn(host.f32, n * sizeof(float), device));
      device_view.f32 = static_cast<const float*>(f.values.raw_data());
      break;
    }
  }
  return f;
}

StatusOr<DeviceLowRankBlock> DeviceLowRankBlock::Upload(const kv::LowRankBlock& block,
                                                        Device device) {
  DeviceLowRankBlock d;
  d.source_ = FactorBytes(block.keys.us.View());
  d.tokens_ = block.tokens();
  d.key_rank_ = block.keys.rank;
  d.value_rank_ = block.values.rank;
  FZ_ASSIGN_OR_RETURN(d.key_us_, UploadFactor(block.keys.us.View(), device, d.view_.key_us));
  FZ_ASSIGN_OR_RETURN(d.key_vt_, UploadFactor(block.keys.vt.View(), device, d.view_.key_vt));
  FZ_ASSIGN_OR_RETURN(d.value_us_, UploadFactor(block.values.us.View(), device, d.view_.value_us));
  FZ_ASSIGN_OR_RETURN(d.value_vt_, UploadFactor(block.values.vt.View(), device, d.view_.value_vt));
  const std::vector<int32_t> positions = block.positions.Expand();
  d.first_position_ = block.positions.runs().empty() ? 0 : block.positions.runs().front().start;
  FZ_ASSIGN_OR_RETURN(d.positions_,
                      BytesOn(positions.data(), positions.size() * sizeof(int32_t), device));
  d.view_.positions = {static_cast<const int32_t*>(d.positions_.raw_data()), positions.size()};
  FZ_ASSIGN_OR_RETURN(d.ranks_, BytesOn(block.value_ranks.data(),
                                        block.value_ranks.size() * sizeof(uint16_t), device));
  d.view_.value_ranks = {static_cast<const uint16_t*>(d.ranks_.raw_data()),
                         block.value_ranks.size()};
  d.sent_ranks_ = block.value_ranks;
  return d;
}

bool DeviceLowRankBlock::Mirrors(const kv::LowRankBlock& block) const {
  if (source_ != FactorBytes(block.keys.us.View()) || tokens_ != block.tokens() ||
      key_rank_ != block.keys.rank || value_rank_ != block.values.rank) {
    return false;
  }
  return block.positions.runs().empty() || block.positions.runs().front().start == first_position_;
}

Status DeviceLowRankBlock::UpdateRanks(const kv::LowRankBlock& block) {
  if (block.value_ranks.size() != view_.value_ranks.size()) {
    return InternalError("low-rank block of {} ranks mirrored with {}", block.value_ranks.size(),
                         view_.value_ranks.size());
  }
  // The policy regroups every few steps (compress/attentionpack.h): most steps send nothing.
  if (block.value_ranks == sent_ranks_) return absl::OkStatus();
  FZ_RETURN_IF_ERROR(CopyBytes(ranks_.raw_data(), ranks_.device(), block.value_ranks.data(),
                               Device::Cpu(), block.value_ranks.size() * sizeof(uint16_t)));
  sent_ranks_ = block.value_ranks;
  return absl::OkStatus();
}

StatusOr<std::span<const DeviceLowRankBlock>> DeviceLowRankBlocks::Sync(
    int layer, std::span<const kv::LowRankBlock> blocks, Device device) {
  if (layer >= static_cast<int>(layers_.size())) layers_.resize(static_cast<size_t>(layer) + 1);
  std::vector<DeviceLowRankBlock>& copies = layers_[static_cast<size_t>(layer)];
  // Copies stay valid while the host blocks they were made from are the same blocks in order.
  size_t same = 0;
  while (same < copies.size() && same < blocks.size() && copies[same].Mirrors(blocks[same])) {
    ++same;
  }
  copies.resize(same);
  for (size_t i = same; i < blocks.size(); ++i) {
    FZ_ASSIGN_OR_RETURN(DeviceLowRankBlock copy, DeviceLowRankBlock::Upload(blocks[i], device));
    copies.push_back(std::move(copy));
  }
  for (size_t i = 0; i < same; ++i) FZ_RETURN_IF_ERROR(copies[i].UpdateRanks(blocks[i]));
  return std::span<const DeviceLowRankBlock>(copies);
}

}  // namespace framezip::engine::llm
