#include "kvstore/block_key.h"

#include <catch2/catch.hpp>

namespace framezip::kvstore {
namespace {

TEST_CASE("block keys chain: equal prefixes share keys, any difference changes them",
          "[unit][kvstore]") {
  const std::vector<int32_t> tokens_a = {1, 2, 3, 4};
  const std::vector<int32_t> tokens_b = {1, 2, 3, 5};
  std::array<uint8_t, 32> video1{};
  std::array<uint8_t, 32> video2{};
  video2[0] = 1;
  const BlockKeyInput base{"tiny", "zipvl tau=0.975", tokens_a, {video1}};

  const BlockKey k1 = ChainBlockKey(kRootBlockKey, base);
  CHECK(k1 == ChainBlockKey(kRootBlockKey, base));  // deterministic

  BlockKeyInput other = base;
  other.token_ids = tokens_b;
  CHECK(ChainBlockKey(kRootBlockKey, other) != k1);
  other = base;
  other.media_hashes = {video2};
  CHECK(ChainBlockKey(kRootBlockKey, other) != k1);  // different media never collide
  other = base;
  other.model_id = "other";
  CHECK(ChainBlockKey(kRootBlockKey, other) != k1);
  other = base;
  other.compression_config = "none";
  CHECK(ChainBlockKey(kRootBlockKey, other) != k1);
  CHECK(ChainBlockKey(k1, base) != k1);  // the parent is part of the key

  // Length prefixes: moving a byte between model id and config changes the key.
  BlockKeyInput x = base, y = base;
  x.model_id = "ab";
  x.compression_config = "c";
  y.model_id = "a";
  y.compression_config = "bc";
  CHECK(ChainBlockKey(kRootBlockKey, x) != ChainBlockKey(kRootBlockKey, y));
  CHECK(BlockKeyHex(k1).size() == 64);
}

}  // namespace
}  // namespace framezip::kvstore
