// One sequence's state beside a Decoder: its KV cache, its position and its compression policy.
// A Decoder is stateless; everything a conversation carries from step to step lives here.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/compress/policy.h"
#include "engine/kv/sequence_kv.h"
#include "engine/llm/device_low_rank_block.h"
#include "engine/llm/low_rank_statistics.h"

namespace framezip::engine::llm {

struct Sequence {
  kv::SequenceKv kv;
  std::unique_ptr<compress::CompressionPolicy> policy;
  int64_t length = 0;  // positions consumed so far = the position of the next token
  // Per-layer kept tokens and selection time of the prefills since the last Reset (the runtime
  // resets it per turn).
  compress::PrefillStats prefill_stats;
  // A GPU decoder's copies of kv's AttentionPack blocks (made on first use, per layer).
  DeviceLowRankBlocks device_blocks;
  // This step's AttentionPack statistics not yet handed to the policy.
  LowRankStatisticsInFlight low_rank_statistics;
};

}  // namespace framezip::engine::llm
