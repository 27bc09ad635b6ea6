// Block keys: a hash chain over the content of a KV block, so equal prefixes share blocks and
// different media never collide:
//   key_i = SHA-256(key_{i-1} | model id | compression config | token ids of block i |
//                   content hashes of the media in block i)
// with key_{-1} = 32 zero bytes. Every variable-length field is length-prefixed, so no two
// different inputs serialize to the same bytes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace framezip::kvstore {

using BlockKey = std::array<uint8_t, 32>;

struct BlockKeyInput {
  std::string_view model_id;
  std::string_view compression_config;  // canonical text of the policy and its knobs
  std::span<const int32_t> token_ids;
  std::vector<std::array<uint8_t, 32>> media_hashes;
};

BlockKey ChainBlockKey(const BlockKey& parent, const BlockKeyInput& input);

// The parent of the first block.
constexpr BlockKey kRootBlockKey{};

std::string BlockKeyHex(const BlockKey& key);

}  // namespace framezip::kvstore
