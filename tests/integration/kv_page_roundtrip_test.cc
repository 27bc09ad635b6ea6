// The round trip of a session's KV: engine pages → page codec blocks → each store tier (host
// RAM, disk, a real redis-server, and a real framezip-kvstore over gRPC) → engine pages,
// bit-identical for every page format the engine stores (f32, f16, int4, int2:
// kv::StorableFormats()).
#include <catch2/catch.hpp>
#include <random>

#include "engine/kv/kv_pools.h"
#include "engine/kv/page_codec.h"
#include "kvstore/block_key.h"
#include "kvstore/service/remote_store.h"
#include "kvstore/tiered_store.h"
#include "tests/integration/kvstore_harness.h"
#include "tests/testing/random.h"
#include "tests/testing/temp_dir.h"

namespace framezip {
namespace {

namespace kv = engine::kv;
using namespace std::chrono_literals;

constexpr int kLayers = 2;
constexpr int kHeads = 2;
constexpr int kHeadDim = 32;
constexpr int kPageTokens = 16;

// One sequence per storable format (quantised formats beside f16 full-precision pages), filled
// with random tokens of random classes.
struct FilledSequence {
  kv::KvFormat format;
  std::unique_ptr<kv::KvPools> pools;
  kv::KvPrecision precision;
  kv::SequenceKv kv;
};

FilledSequence Fill(kv::KvFormat format, std::mt19937_64& rng) {
  FilledSequence f{format, nullptr, {}, {}};
  const bool dense = format == kv::KvFormat::kF32 || format == kv::KvFormat::kF16;
  f.precision = dense ? kv::KvPrecision{format, format, format}
                      : kv::KvPrecision{kv::KvFormat::kF16, format, format};
  const std::vector<kv::KvFormat> formats = {f.precision.full, format};
  auto pools = kv::KvPools::Create(kv::PageLayout{kPageTokens, kHeads, kHeadDim, format}, formats,
                                   int64_t{64} << 20);
  REQUIRE(pools.ok());
  f.pools = *std::move(pools);
  auto seq = kv::SequenceKv::Create(*f.pools, kLayers, f.precision);
  REQUIRE(seq.ok());
  f.kv = *std::move(seq);
  const int count = 150;
  const size_t row = kHeads * kHeadDim;
  for (int layer = 0; layer < kLayers; ++layer) {
    const std::vector<float> k = testing::RandomNormal(row * count, rng);
    const std::vector<float> v = testing::RandomNormal(row * count, rng);
    std::vector<int32_t> pos(count);
    std::vector<uint8_t> cls(count);
    for (int i = 0; i < count; ++i) {
      pos[i] = i;
      cls[i] = static_cast<uint8_t>(1 + rng() % 3);  // kFull, kImportant, kRest
    }
    REQUIRE(f.kv.Append(layer, k.data(), v.data(), pos.data(), count, cls.data()).ok());
  }
  return f;
}

// Every page's format, token count, positions and bytes.
std::vector<std::string> Pages(const kv::SequenceKv& seq) {
  std::vector<std::string> out;
  for (int layer = 0; layer < seq.num_layers(); ++layer) {
    for (size_t i = 0; i < seq.pages(layer).size(); ++i) {
      const kv::PageImage im = seq.page_image(layer, i);
      std::string p(1, static_cast<char>(im.format));
      p.append(reinterpret_cast<const char*>(&im.num_tokens), sizeof(im.num_tokens));
      p.append(reinterpret_cast<const char*>(im.positions.data()), im.positions.size_bytes());
      p.append(reinterpret_cast<const char*>(im.bytes.data()), im.bytes.size());
      out.push_back(std::move(p));
    }
  }
  return out;
}

// Puts the sequence's blocks into `store`, reads them back, restores and compares.
void RoundTrip(kvstore::KvStore& store, kvstore::Tier expect_tier, const FilledSequence& f) {
  CAPTURE(kv::KvFormatName(f.format), kvstore::TierName(expect_tier));
  kv::SegmentState state;
  state.sequence_length = 150;
  state.tokens.assign(150, 3);
  state.policy = "none";
  auto seg = kv::EncodeSegment(f.kv, {}, state, 8 << 10);
  REQUIRE(seg.ok());
  REQUIRE(seg->blocks.size() > 1);
  std::vector<kvstore::BlockKey> keys;
  kvstore::BlockKey parent = kvstore::kRootBlockKey;
  const std::string config = std::string("roundtrip/") + std::string(kv::KvFormatName(f.format));
  for (const std::string& block : seg->blocks) {
    const kvstore::BlockKey key = kvstore::ChainBlockKey(
        parent, {.model_id = "test", .compression_config = config, .token_ids = {}, .media_hashes = {}});
    auto put = store.Put(key, block, {.highest_tier = expect_tier});
    INFO((put.ok() ? "" : std::string(put.status().message())));
    REQUIRE(put.ok());
    keys.push_back(key);
    parent = key;
  }
  std::vector<std::string> blocks;
  for (const kvstore::BlockKey& key : keys) {
    auto got = store.Get(key, {.promote = false});
    INFO((got.ok() ? "" : std::string(got.status().message())));
    REQUIRE(got.ok());
    CHECK(got->served_from == expect_tier);
    blocks.push_back(*got->bytes);
  }
  auto decoded = kv::DecodeSegment(blocks);
  REQUIRE(decoded.ok());
  auto target = kv::SequenceKv::Create(*f.pools, kLayers, f.precision);
  REQUIRE(target.ok());
  auto restored = kv::RestoreSegments(std::span(&*decoded, 1), *target);
  REQUIRE(restored.ok());
  CHECK(Pages(*target) == Pages(f.kv));
  CHECK(store.Delete(keys).ok());
}

TEST_CASE("engine pages round-trip bit-identically through every KV store tier",
          "[integration][kvstore][engine]") {
  testing::TempDir dir;
  std::mt19937_64 rng(testing::TestSeed());
  std::vector<FilledSequence> sequences;
  for (kv::KvFormat format : kv::StorableFormats()) sequences.push_back(Fill(format, rng));
  REQUIRE(sequences.size() >= 4);  // f32, f16, int4, int2

  SECTION("host") {
    auto store = kvstore::TieredStore::Open({});
    REQUIRE(store.ok());
    for (const FilledSequence& f : sequences) RoundTrip(**store, kvstore::Tier::kHost, f);
  }
  SECTION("disk") {
    kvstore::TieredStoreOptions o;
    o.host.reset();
    o.disk = kvstore::DiskTierOptions{};
    o.disk->dir = dir.path() / "disk";
    auto store = kvstore::TieredStore::Open(o);
    REQUIRE(store.ok());
    for (const FilledSequence& f : sequences) RoundTrip(**store, kvstore::Tier::kDisk, f);
  }
  SECTION("redis") {
    kvstore::test::RedisServer redis(dir.path());
    REQUIRE(redis.running());
    kvstore::TieredStoreOptions o;
    o.host.reset();
    o.redis = kvstore::RedisTierOptions{};
    o.redis->port = redis.port();
    o.redis->chunk_bytes = 16 << 10;
    auto store = kvstore::TieredStore::Open(o);
    REQUIRE(store.ok());
    for (const FilledSequence& f : sequences) RoundTrip(**store, kvstore::Tier::kRedis, f);
  }
  SECTION("framezip-kvstore over gRPC") {
    kvstore::test::KvstoreDaemon daemon(dir.path(), {"--kv-host-bytes", std::to_string(64 << 20)});
    REQUIRE(daemon.running());
    auto store = kvstore::service::RemoteStore::Connect(
        {.address = daemon.address(), .timeout = 20s, .chunk_bytes = 8 << 10,
         .connect_timeout = 10s});
    REQUIRE(store.ok());
    for (const FilledSequence& f : sequences) RoundTrip(**store, kvstore::Tier::kHost, f);
  }
}

}  // namespace
}  // namespace framezip
