// The page codec (engine/kv/page_codec.h): every page format a pool can be created with round-trips
// bit-identically through blocks, incremental segments restore the prefix they end at, and any
// corruption is an error, never garbage or a half-restored sequence.
#include "engine/kv/page_codec.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "common/crc32c.h"
#include "engine/kv/kv_pools.h"
#include "tests/testing/random.h"
#include "tests/testing/temp_dir.h"

namespace framezip::engine::kv {
namespace {

constexpr int kLayers = 3;
constexpr int kHeads = 2;
constexpr int kHeadDim = 32;  // quantised pages group values by 32 channels
constexpr int kPageTokens = 8;

// A sequence storing (some of) its tokens in `format`: a dense format holds every class; a
// quantised one holds kImportant/kRest tokens beside f16 kFull ones, as compression policies do.
struct TestSequence {
  std::unique_ptr<KvPools> pools;
  KvPrecision precision;
  SequenceKv kv;
};

TestSequence MakeSequence(KvFormat format, int64_t max_bytes = int64_t{64} << 20) {
  TestSequence t;
  const bool dense = format == KvFormat::kF32 || format == KvFormat::kF16;
  t.precision =
      dense ? KvPrecision{format, format, format} : KvPrecision{KvFormat::kF16, format, format};
  const std::vector<KvFormat> formats = {t.precision.full, format};
  auto pools =
      KvPools::Create(PageLayout{kPageTokens, kHeads, kHeadDim, format}, formats, max_bytes);
  REQUIRE(pools.ok());
  t.pools = *std::move(pools);
  auto kv = SequenceKv::Create(*t.pools, kLayers, t.precision);
  REQUIRE(kv.ok());
  t.kv = *std::move(kv);
  return t;
}

SequenceKv EmptyLike(const TestSequence& t, int layers = kLayers) {
  auto kv = SequenceKv::Create(*t.pools, layers, t.precision);
  REQUIRE(kv.ok());
  return *std::move(kv);
}

// Appends `count` random tokens to every layer at positions from `start`, with random token
// classes (so layers are ragged and every format of the precision gets pages).
void AppendRandom(SequenceKv& kv, int32_t start, int count, std::mt19937_64& rng) {
  const size_t row = kHeads * kHeadDim;
  for (int layer = 0; layer < kv.num_layers(); ++layer) {
    const std::vector<float> k = testing::RandomNormal(row * count, rng);
    const std::vector<float> v = testing::RandomNormal(row * count, rng);
    std::vector<int32_t> pos(count);
    std::vector<uint8_t> cls(count, kFull);
    for (int i = 0; i < count; ++i) {
      pos[i] = start + i;
      cls[i] = static_cast<uint8_t>(rng() % 4);  // kDrop, kFull, kImportant, kRest
      if (layer == 0 && cls[i] == kDrop) cls[i] = kFull;
    }
    REQUIRE(kv.Append(layer, k.data(), v.data(), pos.data(), count, cls.data()).ok());
  }
}

struct PageCopy {
  KvFormat format;
  int32_t num_tokens;
  std::vector<int32_t> positions;
  std::vector<std::byte> bytes;
  bool operator==(const PageCopy&) const = default;
};

std::vector<std::vector<PageCopy>> Snapshot(const SequenceKv& kv) {
  std::vector<std::vector<PageCopy>> out(kv.num_layers());
  for (int layer = 0; layer < kv.num_layers(); ++layer) {
    for (size_t i = 0; i < kv.pages(layer).size(); ++i) {
      const PageImage im = kv.page_image(layer, i);
      out[layer].push_back(PageCopy{im.format,
                                    im.num_tokens,
                                    {im.positions.begin(), im.positions.end()},
                                    {im.bytes.begin(), im.bytes.end()}});
    }
  }
  return out;
}

StatusOr<std::vector<DecodedSegment>> DecodeAll(const std::vector<EncodedSegment>& segs) {
  std::vector<DecodedSegment> out;
  for (const EncodedSegment& s : segs) {
    FZ_ASSIGN_OR_RETURN(DecodedSegment d, DecodeSegment(s.blocks));
    out.push_back(std::move(d));
  }
  return out;
}

SegmentState StateWith(int64_t length, std::vector<int32_t> tokens) {
  SegmentState s;
  s.sequence_length = length;
  s.tokens = std::move(tokens);
  s.pending = {7};
  s.policy = "none";
  return s;
}

TEST_CASE("page codec round-trips every storable page format bit-identically, in segments",
          "[unit][engine][kv]") {
  const std::vector<KvFormat> formats = StorableFormats();
  REQUIRE(formats.size() >= 2);  // f32 and f16 at least
  std::mt19937_64 rng(testing::TestSeed());
  for (KvFormat format : formats) {
    CAPTURE(KvFormatName(format));
    TestSequence t = MakeSequence(format);
    SequenceKv& kv = t.kv;

    // Three commits; each ends mid-page, so the next segment re-sends the partial pages.
    std::vector<EncodedSegment> segments;
    std::vector<std::vector<std::vector<PageCopy>>> snapshots;
    SegmentMark mark;
    int32_t pos = 0;
    for (int count : {13, 1, 21}) {
      AppendRandom(kv, pos, count, rng);
      pos += count;
      // Small blocks so a segment spans several.
      auto seg = EncodeSegment(kv, mark, StateWith(pos, std::vector<int32_t>(count, pos)), 900);
      REQUIRE(seg.ok());
      CHECK(seg->blocks.size() > 1);
      for (const std::string& b : seg->blocks) CHECK(b.size() <= 900);
      mark = seg->next_mark;
      segments.push_back(*std::move(seg));
      snapshots.push_back(Snapshot(kv));
    }
    // The format under test is really in the pages written.
    CHECK(std::find(segments[2].formats.begin(), segments[2].formats.end(), format) !=
          segments[2].formats.end());
    // A later segment does not re-send what was committed and cannot change.
    CHECK(segments[2].pages < kv.num_pages());

    auto decoded = DecodeAll(segments);
    REQUIRE(decoded.ok());
    for (size_t n = 1; n <= segments.size(); ++n) {
      CAPTURE(n);
      SequenceKv restored = EmptyLike(t);
      auto r = RestoreSegments(std::span(decoded->data(), n), restored);
      REQUIRE(r.ok());
      CHECK(Snapshot(restored) == snapshots[n - 1]);
      CHECK(r->state.sequence_length == (*decoded)[n - 1].state.sequence_length);
      CHECK(r->state.tokens.size() == static_cast<size_t>(r->state.sequence_length));
      CHECK(r->mark.next_segment == n);
      CHECK(r->mark.history_tokens == static_cast<int64_t>(r->state.tokens.size()));
      if (n == segments.size()) {
        for (int layer = 0; layer < kLayers; ++layer) {
          CHECK(restored.positions(layer) == kv.positions(layer));
        }
        // Continuing from the restored mark sends only what can still change.
        auto next = EncodeSegment(restored, r->mark, StateWith(pos, {}), 900);
        REQUIRE(next.ok());
        CHECK(next->pages < restored.num_pages());
      }
    }
  }
}

TEST_CASE("page codec rejects corrupt, truncated, reordered and foreign blocks",
          "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  TestSequence t = MakeSequence(KvFormat::kF16);
  SequenceKv& kv = t.kv;
  AppendRandom(kv, 0, 30, rng);
  auto seg = EncodeSegment(kv, {}, StateWith(30, std::vector<int32_t>(30, 1)), 512);
  REQUIRE(seg.ok());
  REQUIRE(seg->blocks.size() >= 3);
  REQUIRE(DecodeSegment(seg->blocks).ok());

  SECTION("any flipped byte is caught") {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<std::string> bad = seg->blocks;
      std::string& b = bad[rng() % bad.size()];
      const size_t at = rng() % b.size();
      b[at] = static_cast<char>(b[at] ^ (1 + rng() % 255));
      auto d = DecodeSegment(bad);
      CAPTURE(trial, at);
      REQUIRE_FALSE(d.ok());
      CHECK((absl::IsDataLoss(d.status()) || absl::IsInvalidArgument(d.status())));
    }
  }
  SECTION("truncated, missing and reordered blocks") {
    std::vector<std::string> bad = seg->blocks;
    bad.back().pop_back();
    CHECK(absl::IsDataLoss(DecodeSegment(bad).status()));
    bad = seg->blocks;
    bad.pop_back();
    CHECK(absl::IsInvalidArgument(DecodeSegment(bad).status()));
    bad = seg->blocks;
    std::swap(bad[0], bad[1]);
    CHECK(absl::IsInvalidArgument(DecodeSegment(bad).status()));
    CHECK(absl::IsInvalidArgument(DecodeSegment({}).status()));
    CHECK(absl::IsDataLoss(DecodeSegment(std::vector<std::string>{"not a block"}).status()));
  }
  SECTION("another layout is refused and leaves the target empty") {
    auto decoded = DecodeSegment(seg->blocks);
    REQUIRE(decoded.ok());
    SequenceKv other = EmptyLike(t, kLayers + 1);
    auto r = RestoreSegments(std::span(&*decoded, 1), other);
    CHECK(absl::IsInvalidArgument(r.status()));
    CHECK(other.num_pages() == 0);
  }
  SECTION("segments out of order are refused") {
    auto seg1 = EncodeSegment(kv, seg->next_mark, StateWith(30, {}), 512);
    REQUIRE(seg1.ok());
    auto d1 = DecodeSegment(seg1->blocks);
    REQUIRE(d1.ok());
    SequenceKv target = EmptyLike(t);
    CHECK(absl::IsInvalidArgument(RestoreSegments(std::span(&*d1, 1), target).status()));
    CHECK(target.num_pages() == 0);
  }
  SECTION("a pool that runs out midway leaves nothing allocated") {
    // A budget one page short of what the segment needs.
    TestSequence small =
        MakeSequence(KvFormat::kF16, static_cast<int64_t>(kv.bytes()) -
                                         static_cast<int64_t>(kv.bytes()) / kv.num_pages());
    auto decoded = DecodeSegment(seg->blocks);
    REQUIRE(decoded.ok());
    SequenceKv& target = small.kv;
    auto r = RestoreSegments(std::span(&*decoded, 1), target);
    CHECK(absl::IsResourceExhausted(r.status()));
    CHECK(target.num_pages() == 0);
    CHECK(small.pools->pages_in_use() == 0);
  }
}

}  // namespace
}  // namespace framezip::engine::kv

namespace framezip::engine::kv {
namespace {

// A low-rank block (ranks 4 / 8, seed 1) of random keys and values at `positions`.
LowRankBlock RandomBlock(const std::vector<int32_t>& positions, FactorFormat factors,
                         std::mt19937_64& rng) {
  const size_t n = positions.size() * static_cast<size_t>(kHeads * kHeadDim);
  const std::vector<float> k = testing::RandomNormal(n, rng);
  const std::vector<float> v = testing::RandomNormal(n, rng);
  auto block = MakeLowRankBlock(k, v, positions, kHeads, kHeadDim,
                                ops::RopeParams{.head_dim = kHeadDim, .theta = 1e4},
                                {.rank_k = 4, .rank_v = 8, .factors = factors, .seed = 1});
  REQUIRE(block.ok());
  return *std::move(block);
}

TEST_CASE(
    "page codec carries low-rank blocks of either factor format exactly, segment after segment",
    "[unit][engine][kv]") {
  const FactorFormat factors = GENERATE(FactorFormat::kF16, FactorFormat::kInt4);
  CAPTURE(FactorFormatName(factors));
  std::mt19937_64 rng(testing::TestSeed());
  TestSequence t = MakeSequence(KvFormat::kF16);
  AppendRandom(t.kv, 0, 5, rng);
  const int64_t cols = kHeads * kHeadDim;
  auto add_block = [&](int32_t first, int n) {
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = first + i;
    for (int layer = 0; layer < kLayers; ++layer) {
      LowRankBlock block = RandomBlock(pos, factors, rng);
      block.value_ranks[0] = 2;  // decode-time state travels too
      block.importance[1] = 0.25f;
      REQUIRE(t.kv.AppendLowRankBlock(layer, std::move(block)).ok());
    }
  };
  add_block(5, 40);
  SegmentState state;
  state.sequence_length = 45;
  auto s0 = EncodeSegment(t.kv, SegmentMark{}, state, 4096);
  REQUIRE(s0.ok());
  // Decode between the commits moves the first block's ranks and importance, not its factors.
  std::vector<std::vector<LowRankBlock>> at_s0;
  for (int layer = 0; layer < kLayers; ++layer) {
    at_s0.push_back(t.kv.low_rank_blocks(layer));
    LowRankBlock& first = t.kv.mutable_low_rank_blocks(layer)[0];
    first.value_ranks[3] = 1;
    first.importance[0] = 0.5f;
  }
  AppendRandom(t.kv, 45, 3, rng);
  add_block(48, 20);
  state.sequence_length = 68;
  auto s1 = EncodeSegment(t.kv, s0->next_mark, state, 4096);
  REQUIRE(s1.ok());
  // The second segment keeps the first block by reference: the new block's factors and the
  // first one's 40 ranks and weights, not its factors again (a resend of both blocks is larger).
  auto full = EncodeSegment(t.kv, SegmentMark{}, state, 4096);
  REQUIRE(full.ok());
  size_t s1_bytes = 0, full_bytes = 0;
  for (const std::string& b : s1->blocks) s1_bytes += b.size();
  for (const std::string& b : full->blocks) full_bytes += b.size();
  CHECK(s1_bytes + t.kv.low_rank_blocks(0)[0].keys.bytes() * kLayers / 2 < full_bytes);

  std::vector<DecodedSegment> decoded;
  for (const EncodedSegment* s : {&*s0, &*s1}) {
    auto d = DecodeSegment(s->blocks);
    INFO((d.ok() ? "" : MessageOf(d.status())));
    REQUIRE(d.ok());
    decoded.push_back(*std::move(d));
  }
  SequenceKv restored = EmptyLike(t);
  auto r = RestoreSegments(decoded, restored);
  INFO((r.ok() ? "" : MessageOf(r.status())));
  REQUIRE(r.ok());
  for (int layer = 0; layer < kLayers; ++layer) {
    CHECK(decoded[1].layers[static_cast<size_t>(layer)].kept_blocks.size() == 1);
    CHECK(decoded[1].layers[static_cast<size_t>(layer)].blocks.size() == 1);
    CHECK(restored.positions(layer) == t.kv.positions(layer));
    CHECK(restored.num_tokens(layer) == t.kv.num_tokens(layer));
    const auto& want = t.kv.low_rank_blocks(layer);
    const auto& got = restored.low_rank_blocks(layer);
    REQUIRE(got.size() == 2);
    for (size_t b = 0; b < want.size(); ++b) {
      CHECK(got[b].value_ranks == want[b].value_ranks);
      CHECK(got[b].importance == want[b].importance);
      CHECK(got[b].positions == want[b].positions);
      CHECK(got[b].keys.rank == want[b].keys.rank);
      CHECK(got[b].keys.format() == factors);
      CHECK(got[b].keys.us == want[b].keys.us);
      CHECK(got[b].keys.vt == want[b].keys.vt);
      CHECK(got[b].values.us == want[b].values.us);
      CHECK(got[b].values.vt == want[b].values.vt);
    }
    // Rebuilt K/V of the whole layer agree too.
    const size_t n = static_cast<size_t>(t.kv.num_tokens(layer) * cols);
    std::vector<float> k0(n), v0(n), k1(n), v1(n);
    REQUIRE(t.kv.Gather(layer, k0.data(), v0.data()).ok());
    REQUIRE(restored.Gather(layer, k1.data(), v1.data()).ok());
    CHECK(k0 == k1);
    CHECK(v0 == v1);
  }
  CHECK(restored.low_rank_bytes() == t.kv.low_rank_bytes());

  // The first segment alone restores the blocks as they were then.
  SequenceKv first_only = EmptyLike(t);
  REQUIRE(RestoreSegments(std::span(decoded).first(1), first_only).ok());
  for (int layer = 0; layer < kLayers; ++layer) {
    const auto& got = first_only.low_rank_blocks(layer);
    REQUIRE(got.size() == 1);
    CHECK(got[0].value_ranks == at_s0[static_cast<size_t>(layer)][0].value_ranks);
    CHECK(got[0].importance == at_s0[static_cast<size_t>(layer)][0].importance);
  }

  // A restored sequence commits on from where it was: its next segment keeps both blocks.
  add_block(80, 8);
  auto s2 = EncodeSegment(restored, r->mark, state, 4096);
  REQUIRE(s2.ok());
  auto d2 = DecodeSegment(s2->blocks);
  REQUIRE(d2.ok());
  CHECK(d2->layers[0].kept_blocks.size() == 2);
  CHECK(d2->layers[0].blocks.empty());  // add_block went to t.kv, not to `restored`

  // A segment that keeps more blocks than were committed, or a block under another token count,
  // or ranks past the block's value rank, is refused, and the target stays empty.
  auto refused = [&](std::vector<DecodedSegment> bad) {
    SequenceKv target = EmptyLike(t);
    const auto st = RestoreSegments(bad, target);
    CHECK(target.stored_tokens() == 0);
    return st.status();
  };
  std::vector<DecodedSegment> too_many = decoded;
  too_many[1].layers[0].kept_blocks.push_back(too_many[1].layers[0].kept_blocks[0]);
  CHECK(absl::IsInvalidArgument(refused(too_many)));
  std::vector<DecodedSegment> resized = decoded;
  resized[1].layers[0].kept_blocks[0].value_ranks.push_back(0);
  resized[1].layers[0].kept_blocks[0].importance.push_back(0.f);
  CHECK(absl::IsInvalidArgument(refused(resized)));
  std::vector<DecodedSegment> ranked = decoded;
  ranked[1].layers[0].kept_blocks[0].value_ranks[0] = 9;  // the blocks' value rank is 8
  CHECK(absl::IsDataLoss(refused(ranked)));
}

}  // namespace
}  // namespace framezip::engine::kv

namespace framezip::engine::kv {
namespace {

TEST_CASE("low-rank blocks are charged to the pools' byte budget and given back",
          "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const ops::RopeParams rope{.head_dim = kHeadDim, .theta = 1e4};
  const int64_t cols = kHeads * kHeadDim, n = 40;
  const std::vector<float> k = testing::RandomNormal(static_cast<size_t>(n * cols), rng);
  const std::vector<float> v = testing::RandomNormal(static_cast<size_t>(n * cols), rng);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  auto block = MakeLowRankBlock(k, v, pos, kHeads, kHeadDim, rope, {.rank_k = 4, .rank_v = 8});
  REQUIRE(block.ok());
  const int64_t bytes = static_cast<int64_t>(block->bytes());

  TestSequence roomy = MakeSequence(KvFormat::kF16);
  const int64_t before = roomy.pools->used_bytes();
  REQUIRE(roomy.kv.AppendLowRankBlock(0, *block).ok());
  CHECK(roomy.pools->used_bytes() == before + bytes);
  roomy.kv.Clear();
  CHECK(roomy.pools->used_bytes() == before);

  TestSequence tight = MakeSequence(KvFormat::kF16, bytes - 1);
  const Status st = tight.kv.AppendLowRankBlock(0, *std::move(block));
  CHECK(absl::IsResourceExhausted(st));
  CHECK(tight.kv.num_tokens(0) == 0);
}

}  // namespace
}  // namespace framezip::engine::kv

namespace framezip::engine::kv {
namespace {

TEST_CASE("a reused page comes back zeroed, so page images never carry a freed page's K/V",
          "[unit][engine][kv]") {
  for (const KvFormat format : {KvFormat::kF16, KvFormat::kInt4}) {
    auto pool = PagePool::Create(PageLayout{kPageTokens, kHeads, kHeadDim, format}, 4);
    REQUIRE(pool.ok());
    auto first = (*pool)->Allocate();
    REQUIRE(first.ok());
    const size_t bytes = (*pool)->layout().PageBytes();
    std::memset((*pool)->Keys(*first), 0xA5, bytes);
    (*pool)->Free(*first);
    auto again = (*pool)->Allocate();
    REQUIRE(again.ok());
    CHECK(*again == *first);  // the free list hands the same page back
    const auto* p = static_cast<const unsigned char*>((*pool)->Keys(*again));
    CHECK(std::all_of(p, p + bytes, [](unsigned char b) { return b == 0; }));
  }
}

// The closed-form inputs of tests/data/kv/segment_v2_low_rank.cc.in, layer `layer`: 40 block
// tokens' post-RoPE keys and values [40, kHeads·kHeadDim].
void V2FixtureBlockInputs(int layer, std::vector<float>& k, std::vector<float>& v) {
  const int64_t row = kHeads * kHeadDim;
  k.resize(static_cast<size_t>(40 * row));
  v.resize(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    const float t = static_cast<float>(static_cast<int64_t>(i) / row);
    const float c = static_cast<float>(static_cast<int64_t>(i) % row);
    k[i] = std::sin(0.05f * t * static_cast<float>(1 + layer)) * std::cos(0.2f * c) +
           0.01f * std::sin(1.7f * static_cast<float>(i));
    v[i] = std::cos(0.07f * t) * std::sin(0.3f * c + static_cast<float>(layer)) +
           0.01f * std::cos(2.3f * static_cast<float>(i));
  }
}

TEST_CASE("a version-2 segment with low-rank blocks, written by an older engine, still restores",
          "[unit][engine][kv]") {
  std::ifstream in(testing::SourceDir() / "tests/data/kv/segment_v2_low_rank.bin",
                   std::ios::binary);
  REQUIRE(in.good());
  uint32_t count = 0;
  in.read(reinterpret_cast<char*>(&count), 4);
  std::vector<std::string> blocks(count);
  for (std::string& b : blocks) {
    uint32_t len = 0;
    in.read(reinterpret_cast<char*>(&len), 4);
    b.resize(len);
    in.read(b.data(), len);
  }
  REQUIRE(in.good());
  REQUIRE(!blocks.empty());
  uint16_t version = 0;
  std::memcpy(&version, blocks[0].data() + 4, sizeof(version));
  CHECK(version == 2);

  auto decoded = DecodeSegment(blocks);
  INFO((decoded.ok() ? "" : MessageOf(decoded.status())));
  REQUIRE(decoded.ok());
  const ops::RopeParams rope{.head_dim = kHeadDim, .theta = 1e4};
  std::vector<int32_t> positions(40);
  for (int i = 0; i < 40; ++i) positions[static_cast<size_t>(i)] = 5 + i;
  for (int layer = 0; layer < kLayers; ++layer) {
    INFO("layer " << layer);
    REQUIRE(decoded->layers[static_cast<size_t>(layer)].blocks.size() == 1);
    const LowRankBlock& b = decoded->layers[static_cast<size_t>(layer)].blocks[0];
    CHECK(b.positions.Expand() == positions);
    CHECK(b.positions.runs().size() == 1);  // i32 positions became one run
    CHECK(b.keys.rank == 4);
    CHECK(b.values.rank == 8);
    CHECK(b.keys.format() == FactorFormat::kF16);
    CHECK(b.value_ranks[0] == 2);
    CHECK(b.value_ranks[1] == 8);
    CHECK(b.importance[1] == 0.25f);
    // The stored factors rebuild what today's engine makes of the same inputs (up to the
    // randomized SVD's and f16's rounding, which may differ between BLAS builds).
    std::vector<float> k, v;
    V2FixtureBlockInputs(layer, k, v);
    auto fresh = MakeLowRankBlock(k, v, positions, kHeads, kHeadDim, rope,
                                  {.rank_k = 4, .rank_v = 8, .seed = 1});
    REQUIRE(fresh.ok());
    fresh->value_ranks = b.value_ranks;
    std::vector<float> k_old(k.size()), v_old(v.size()), k_new(k.size()), v_new(v.size());
    REQUIRE(b.Reconstruct(k_old.data(), v_old.data()).ok());
    REQUIRE(fresh->Reconstruct(k_new.data(), v_new.data()).ok());
    double worst = 0;
    for (size_t i = 0; i < k.size(); ++i) {
      worst = std::max(
          {worst, std::fabs(double{k_old[i]} - k_new[i]), std::fabs(double{v_old[i]} - v_new[i])});
    }
    CHECK(worst < 2e-2);
  }
  // And a sequence restores from it: 5 page tokens and the block per layer.
  TestSequence t = MakeSequence(KvFormat::kF16);
  auto r = RestoreSegments(std::span(&*decoded, 1), t.kv);
  INFO((r.ok() ? "" : MessageOf(r.status())));
  REQUIRE(r.ok());
  for (int layer = 0; layer < kLayers; ++layer) {
    CHECK(t.kv.num_tokens(layer) == 45);
    CHECK(t.kv.page_tokens(layer) == 5);
  }
}

// The segment stream inside encoded blocks (their payloads, in order), and a stream framed again
// as one block with valid checksums: what a hostile writer who knows the format could store.
constexpr size_t kTestBlockHeaderBytes = 36;

std::string StreamOf(const std::vector<std::string>& blocks) {
  std::string stream;
  for (const std::string& b : blocks) stream += b.substr(kTestBlockHeaderBytes);
  return stream;
}

std::string Frame(const std::string& stream) {
  std::string block(kTestBlockHeaderBytes, '\0');
  auto put = [&](size_t at, auto v) { std::memcpy(block.data() + at, &v, sizeof(v)); };
  put(0, uint32_t{0x424b5a46});  // "FZKB"
  put(4, kPageCodecVersion);
  put(8, uint32_t{0});   // part
  put(12, uint32_t{1});  // parts
  put(16, uint64_t{stream.size()});
  put(24, Crc32c(stream));
  put(28, static_cast<uint32_t>(stream.size()));
  put(32, Crc32c(stream));
  return block + stream;
}

TEST_CASE(
    "a checksum-valid segment whose low-rank blocks carry huge, negative or cut fields is refused",
    "[unit][engine][kv]") {
  const FactorFormat factors = GENERATE(FactorFormat::kF16, FactorFormat::kInt4);
  CAPTURE(FactorFormatName(factors));
  std::mt19937_64 rng(testing::TestSeed());
  TestSequence t = MakeSequence(KvFormat::kF16);
  const int64_t cols = kHeads * kHeadDim;
  std::vector<int32_t> pos(40);  // two runs
  for (int i = 0; i < 40; ++i) pos[static_cast<size_t>(i)] = 3 + i + (i >= 20 ? 5 : 0);
  for (int layer = 0; layer < kLayers; ++layer) {
    REQUIRE(t.kv.AppendLowRankBlock(layer, RandomBlock(pos, factors, rng)).ok());
  }
  SegmentState state;
  state.sequence_length = 48;
  auto seg = EncodeSegment(t.kv, SegmentMark{}, state, 1 << 20);
  REQUIRE(seg.ok());
  const std::string stream = StreamOf(seg->blocks);
  REQUIRE(DecodeSegment(std::vector<std::string>{Frame(stream)}).ok());

  // Every 4-byte field set to a huge, a negative and a zero value, and the stream cut at every
  // byte: each decodes or is refused — never a crash or an allocation the stream cannot back.
  int64_t refused = 0;
  for (size_t at = 8; at + 4 <= stream.size(); ++at) {
    for (const uint32_t value : {0x7fffffffu, 0xfffffff0u, 0u}) {
      std::string bad = stream;
      std::memcpy(bad.data() + at, &value, 4);
      auto d = DecodeSegment(std::vector<std::string>{Frame(bad)});
      if (!d.ok()) {
        CHECK((absl::IsDataLoss(d.status()) || absl::IsInvalidArgument(d.status())));
        ++refused;
      }
    }
  }
  CHECK(refused > 0);
  // Two fields at once: a block claiming 2^31 - 1 tokens and nearly as many position runs must
  // be refused before anything is sized by those counts.
  const int32_t header[] = {40, kHeads, static_cast<int32_t>(cols), 4, 8};
  const size_t block_at =
      stream.find(std::string(reinterpret_cast<const char*>(header), sizeof(header)));
  REQUIRE(block_at != std::string::npos);
  const size_t runs_at = block_at + sizeof(header) + 4 + 5 * 8 + 1;  // RoPE, then the format byte
  std::string huge = stream;
  const int32_t tokens = 0x7fffffff;
  const uint32_t runs = 0x7ffffff0;
  std::memcpy(huge.data() + block_at, &tokens, 4);
  std::memcpy(huge.data() + runs_at, &runs, 4);
  auto d = DecodeSegment(std::vector<std::string>{Frame(huge)});
  REQUIRE_FALSE(d.ok());
  CHECK(absl::IsDataLoss(d.status()));
  for (size_t n = 0; n < stream.size(); n += 3) {
    auto d = DecodeSegment(std::vector<std::string>{Frame(stream.substr(0, n))});
    CHECK_FALSE(d.ok());
  }
}

TEST_CASE("kept-block segments with huge, negative or cut fields are refused or restore whole",
          "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  TestSequence t = MakeSequence(KvFormat::kF16);
  std::vector<int32_t> pos(24);
  for (int i = 0; i < 24; ++i) pos[static_cast<size_t>(i)] = 2 + i;
  for (int layer = 0; layer < kLayers; ++layer) {
    REQUIRE(t.kv.AppendLowRankBlock(layer, RandomBlock(pos, FactorFormat::kF16, rng)).ok());
  }
  SegmentState state;
  state.sequence_length = 26;
  auto s0 = EncodeSegment(t.kv, SegmentMark{}, state, 1 << 20);
  REQUIRE(s0.ok());
  for (int layer = 0; layer < kLayers; ++layer) {
    t.kv.mutable_low_rank_blocks(layer)[0].importance[2] = 0.75f;
  }
  auto s1 = EncodeSegment(t.kv, s0->next_mark, state, 1 << 20);
  REQUIRE(s1.ok());
  auto d0 = DecodeSegment(s0->blocks);
  REQUIRE(d0.ok());
  const std::string stream = StreamOf(s1->blocks);
  {
    auto d1 = DecodeSegment(std::vector<std::string>{Frame(stream)});
    REQUIRE(d1.ok());
    REQUIRE(d1->layers[0].kept_blocks.size() == 1);
  }

  // Every 4-byte field of the second segment set huge, negative and zero: it decodes and
  // restores after the first, or is refused with DATA_LOSS / INVALID_ARGUMENT and the target
  // left empty — never a crash, an allocation the stream cannot back, or a partial cache.
  int64_t refused = 0, restored = 0;
  for (size_t at = 8; at + 4 <= stream.size(); ++at) {
    for (const uint32_t value : {0x7fffffffu, 0xfffffff0u, 0u}) {
      std::string bad = stream;
      std::memcpy(bad.data() + at, &value, 4);
      auto d1 = DecodeSegment(std::vector<std::string>{Frame(bad)});
      Status st = d1.status();
      SequenceKv target = EmptyLike(t);
      if (d1.ok()) {
        const std::vector<DecodedSegment> both = {*d0, *std::move(d1)};
        st = RestoreSegments(both, target).status();
      }
      if (st.ok()) {
        ++restored;
        continue;
      }
      CHECK((absl::IsDataLoss(st) || absl::IsInvalidArgument(st)));
      CHECK(target.stored_tokens() == 0);
      ++refused;
    }
  }
  CHECK(refused > 0);
  CHECK(restored > 0);  // a changed weight or rank is still a valid segment
  for (size_t n = 0; n < stream.size(); n += 3) {
    CHECK_FALSE(DecodeSegment(std::vector<std::string>{Frame(stream.substr(0, n))}).ok());
  }
}

}  // namespace
}  // namespace framezip::engine::kv
