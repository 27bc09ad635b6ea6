// The device copies of AttentionPack blocks (engine/llm/device_low_rank_block.h), exercised with
// the host as the "device" (the copy is then host memory): a copy reads exactly as its block,
// follows the block's value ranks, and is kept, replaced or added as the host blocks are. The GPU
// path runs the same code with cudaMemcpy behind CopyBytes ([cuda] engine_device_cuda_test).
#include "engine/llm/device_low_rank_block.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "tests/testing/random.h"

namespace framezip::engine::llm {
namespace {

constexpr int kHeads = 4, kKvHeads = 2, kHeadDim = 8, kHd = kKvHeads * kHeadDim;

kv::LowRankBlock RandomBlock(std::mt19937_64& rng, int64_t tokens, int32_t first_position,
                             kv::FactorFormat format) {
  const std::vector<float> k = testing::RandomNormal(static_cast<size_t>(tokens * kHd), rng);
  const std::vector<float> v = testing::RandomNormal(static_cast<size_t>(tokens * kHd), rng);
  std::vector<int32_t> positions(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) positions[static_cast<size_t>(i)] = first_position + i;
  auto block = kv::MakeLowRankBlock(k, v, positions, kKvHeads, kHeadDim,
                                    ops::RopeParams{.head_dim = kHeadDim},
                                    {.rank_k = 6, .rank_v = 8, .factors = format, .seed = 7});
  REQUIRE(block.ok());
  return *std::move(block);
}

// Where a factor view's bytes are (f16 values or int4 codes).
const void* Bytes(const ops::FactorView& v) {
  return v.format == ops::FactorView::Format::kInt4 ? static_cast<const void*>(v.packed)
                                                    : static_cast<const void*>(v.f16);
}

// The block's decode attention for `q`, read through `view` (the host block's own when null).
std::vector<float> Attend(const kv::LowRankBlock& b, const ops::LowRankBlockView* view,
                          const std::vector<float>& q) {
  const std::vector<int32_t> positions = b.positions.Expand();
  const ops::LowRankBlockView host{.key_us = b.keys.us.View(),
                                   .key_vt = b.keys.vt.View(),
                                   .value_us = b.values.us.View(),
                                   .value_vt = b.values.vt.View(),
                                   .positions = positions,
                                   .value_ranks = b.value_ranks};
  std::vector<float> weights(static_cast<size_t>(kHeads * b.tokens()));
  ops::BlockAttention out;
  REQUIRE(
      ops::LowRankBlockAttend(q, view != nullptr ? *view : host,
                              {.num_heads = kHeads, .num_kv_heads = kKvHeads, .head_dim = kHeadDim},
                              b.rope, 0.f, weights, out)
          .ok());
  std::vector<float> all = out.out;
  all.insert(all.end(), out.max.begin(), out.max.end());
  all.insert(all.end(), out.sum.begin(), out.sum.end());
  all.insert(all.end(), weights.begin(), weights.end());
  return all;
}

TEST_CASE("Device copies of low-rank blocks read as the blocks and follow them", "[unit][llm]") {
  const uint64_t seed = testing::TestSeed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<float> q = testing::RandomNormal(kHeads * kHeadDim, rng);
  for (const kv::FactorFormat format : {kv::FactorFormat::kF16, kv::FactorFormat::kInt4}) {
    CAPTURE(kv::FactorFormatName(format));
    std::vector<kv::LowRankBlock> blocks;
    blocks.push_back(RandomBlock(rng, 70, 5, format));
    DeviceLowRankBlocks copies;

    auto synced = copies.Sync(0, blocks, Device::Cpu());
    REQUIRE(synced.ok());
    REQUIRE(synced->size() == 1);
    const ops::LowRankBlockView first = (*synced)[0].view();
    // The copy is other memory holding the same bytes: the same attention, bit for bit.
    REQUIRE(Bytes(first.key_us) != nullptr);
    CHECK(Bytes(first.key_us) != Bytes(blocks[0].keys.us.View()));
    CHECK(Attend(blocks[0], &first, q) == Attend(blocks[0], nullptr, q));

    // The policy lowers some value ranks: the next Sync sends them, into the same copy.
    for (size_t t = 0; t < blocks[0].value_ranks.size(); t += 3) blocks[0].value_ranks[t] = 2;
    synced = copies.Sync(0, blocks, Device::Cpu());
    REQUIRE(synced.ok());
    CHECK(Bytes((*synced)[0].view().value_us) == Bytes(first.value_us));
    CHECK(Attend(blocks[0], &(*synced)[0].view(), q) == Attend(blocks[0], nullptr, q));

    // A recompressed window appends a block: the first copy stays, the second is made.
    blocks.push_back(RandomBlock(rng, 33, 200, format));
    synced = copies.Sync(0, blocks, Device::Cpu());
    REQUIRE(synced.ok());
    REQUIRE(synced->size() == 2);
    CHECK(Bytes((*synced)[0].view().key_vt) == Bytes(first.key_vt));
    CHECK(Attend(blocks[1], &(*synced)[1].view(), q) == Attend(blocks[1], nullptr, q));

    // Other blocks in the first place (a restored conversation): its copy is made again.
    blocks[0] = RandomBlock(rng, 41, 9, format);
    synced = copies.Sync(0, blocks, Device::Cpu());
    REQUIRE(synced.ok());
    REQUIRE(synced->size() == 2);
    CHECK(Attend(blocks[0], &(*synced)[0].view(), q) == Attend(blocks[0], nullptr, q));
    CHECK(Attend(blocks[1], &(*synced)[1].view(), q) == Attend(blocks[1], nullptr, q));

    // Layers keep their own copies; no blocks leave none.
    auto other_layer = copies.Sync(3, {}, Device::Cpu());
    REQUIRE(other_layer.ok());
    CHECK(other_layer->empty());
  }
}

}  // namespace
}  // namespace framezip::engine::llm
