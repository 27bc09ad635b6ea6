// AttentionPack (engine/compress/attentionpack.h) on the shipped model: visual tokens leave the
// pages for low-rank blocks in every layer, full rank reproduces `none`, lower ranks change the
// decode logits (the blocks are what decode reads), the attention importance picks a quarter of
// the tokens for full-rank values, and a conversation survives the page codec and restore.
#include "engine/compress/attentionpack.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/core/step_counters.h"
#include "engine/core/thread_pool.h"
#include "engine/kv/page_codec.h"
#include "engine/runtime/engine.h"
#include "tests/testing/random.h"
#include "tests/testing/shipped_model.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/tiny_decoder.h"

namespace framezip::engine {
namespace {

// Teacher-forced logits of `forced` after the video message, under `policy`.
Tensor Scores(const char* policy, const std::vector<int32_t>& forced) {
  runtime::Engine& eng = testing::ShippedEngine();
  const runtime::Message m =
      testing::SyntheticVideoMessage(16, eng.image_size(), "What color is the cross?");
  auto c = eng.NewConversation(policy);
  REQUIRE(c.ok());
  auto s = eng.ScoreTurn(**c, std::span(&m, 1), forced);
  INFO((s.ok() ? "" : MessageOf(s.status())));
  REQUIRE(s.ok());
  return *std::move(s);
}

double MaxAbs(const Tensor& a) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max<double>(m, std::fabs(a.data<float>()[i]));
  return m;
}

// A sequence of the shipped decoder under `policy`, prefilled with random embeddings of 8 text
// rows, 120 visual rows and 10 text rows (kPrefillRows in all).
constexpr int64_t kPrefillRows = 8 + 120 + 10;

std::unique_ptr<llm::Sequence> PrefilledSequence(const char* policy, uint64_t seed) {
  runtime::Engine& eng = testing::ShippedEngine();
  const llm::Decoder& dec = eng.decoder();
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> visual(static_cast<size_t>(kPrefillRows), 0);
  std::fill(visual.begin() + 8, visual.begin() + 128, uint8_t{1});
  const Tensor embeds = testing::RandomEmbeds(kPrefillRows, dec.shape().hidden, rng);
  auto seq = dec.NewSequence(eng.kv_pool(), kv::KvFormat::kF16, policy);
  INFO(policy);
  REQUIRE(seq.ok());
  auto logits = dec.Prefill(**seq, embeds, {.visual = visual});
  INFO((logits.ok() ? "" : MessageOf(logits.status())));
  REQUIRE(logits.ok());
  return *std::move(seq);
}

// The synthetic video turn under `policy`, `tokens` generated (end of reply ignored).
runtime::TurnResult VideoTurn(const char* policy, int tokens) {
  runtime::Engine& eng = testing::ShippedEngine();
  const runtime::Message m =
      testing::SyntheticVideoMessage(16, eng.image_size(), "What color is the cross?");
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = tokens;
  opt.ignore_eos = true;
  auto conversation = eng.NewConversation(policy);
  REQUIRE(conversation.ok());
  auto turn = eng.RunTurn(**conversation, std::span(&m, 1), opt);
  INFO(policy << ": " << (turn.ok() ? "" : MessageOf(turn.status())));
  REQUIRE(turn.ok());
  return *std::move(turn);
}

const std::vector<int32_t> kForced = {313, 11, 42, 100, 7, 250, 313, 402};

TEST_CASE(
    "attentionpack gives full rank to exactly the top fraction by importance, ties by position",
    "[unit][engine][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  compress::AttentionPackPolicy policy({.top_fraction = 0.25, .ema = 0.5});
  for (int64_t n : {1, 3, 40, 1000, 8190}) {
    // Probabilities of a few distinct values (many ties) or continuous ones, zeros included.
    for (const bool ties : {true, false}) {
      CAPTURE(n, ties);
      std::vector<float> importance(static_cast<size_t>(n)), probs(importance.size());
      std::uniform_int_distribution<int> level(0, 5);
      std::exponential_distribution<float> spread(1.f);
      for (size_t t = 0; t < probs.size(); ++t) {
        importance[t] = ties ? 1e-4f * static_cast<float>(level(rng)) : 1e-4f * spread(rng);
        probs[t] = ties ? 1e-4f * static_cast<float>(level(rng)) : 1e-4f * spread(rng);
      }
      std::vector<uint16_t> ranks(importance.size(), 0);
      uint32_t steps = 0;  // the first step regroups
      policy.OnLowRankAttention(0, probs,
                                {.importance = importance,
                                 .value_ranks = ranks,
                                 .full_rank = 16,
                                 .decode_steps = &steps});
      REQUIRE(steps == 1);
      // The reference: a stable sort by importance, largest first, earlier tokens first on ties.
      std::vector<size_t> order(importance.size());
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return importance[a] > importance[b]; });
      const size_t top = static_cast<size_t>(std::ceil(0.25 * static_cast<double>(n)));
      for (size_t i = 0; i < order.size(); ++i) {
        CAPTURE(i, order[i], importance[order[i]]);
        REQUIRE(ranks[order[i]] == (i < top ? 16 : 4));
      }
    }
  }
}

TEST_CASE("attentionpack moves the importance every step and regroups every regroup steps",
          "[unit][engine][compress]") {
  compress::AttentionPackPolicy policy({.top_fraction = 0.5, .ema = 0.5, .regroup = 3});
  std::vector<float> importance = {0.f, 0.f, 0.f, 0.f};
  std::vector<uint16_t> ranks(4, 16);
  uint32_t steps = 0;
  const compress::LowRankDecodeState block{
      .importance = importance, .value_ranks = ranks, .full_rank = 16, .decode_steps = &steps};
  const std::vector<float> early = {0.4f, 0.3f, 0.2f, 0.1f}, late = {0.f, 0.f, 0.5f, 0.5f};
  policy.OnLowRankAttention(0, early, block);  // step 0 regroups: tokens 0 and 1 lead
  CHECK(ranks == std::vector<uint16_t>{16, 16, 4, 4});
  policy.OnLowRankAttention(0, late, block);  // steps 1 and 2 keep the grouping...
  policy.OnLowRankAttention(0, late, block);
  CHECK(ranks == std::vector<uint16_t>{16, 16, 4, 4});
  CHECK(importance[2] > importance[0]);       // ...while the EMA has moved on
  policy.OnLowRankAttention(0, late, block);  // step 3 regroups by it
  CHECK(ranks == std::vector<uint16_t>{4, 4, 16, 16});
  CHECK(steps == 4);
}

TEST_CASE("attentionpack at full rank reproduces none, and at low rank decode reads the blocks",
          "[unit][engine][compress]") {
  const Tensor none = Scores("none", kForced);
  const Tensor full = Scores("attentionpack:rank_k=64,rank_v=64,groups=1", kForced);
  const Tensor low = Scores("attentionpack:rank_k=4,rank_v=2,groups=1", kForced);
  // Full rank: the factors hold the block exactly up to their f16 rounding (the pages round K/V
  // to f16 too): the logits agree to well under a percent of their range.
  CHECK(testing::MaxAbsDiff(full, none) < 1e-2 * MaxAbs(none));
  // Rank 4 / 2 of 64: a visibly different cache, so every decode position differs.
  CHECK(testing::MaxAbsDiff(low, none) > 1e-2 * MaxAbs(none));
  // The first position comes from the prompt's own (exact) prefill attention: identical.
  const int64_t v = none.dim(1);
  double first = 0;
  for (int64_t i = 0; i < v; ++i) {
    first = std::max<double>(first, std::fabs(low.data<float>()[i] - none.data<float>()[i]));
  }
  CHECK(first < 1e-4 * MaxAbs(none));
}

TEST_CASE("attentionpack with int4 factors holds under half the bytes and decodes nearly alike",
          "[unit][engine][compress]") {
  const Tensor f16 = Scores("attentionpack", kForced);
  const Tensor int4 = Scores("attentionpack:factors=int4", kForced);
  // 4-bit factors move the logits, by less than a tenth of their range on this video.
  CHECK(testing::MaxAbsDiff(int4, f16) > 0);
  CHECK(testing::MaxAbsDiff(int4, f16) < 0.1 * MaxAbs(f16));

  const runtime::TurnResult ra = VideoTurn("attentionpack", 2);
  const runtime::TurnResult rb = VideoTurn("attentionpack:factors=int4", 2);
  const auto low_rank = static_cast<size_t>(kv::KvFormat::kLowRank);
  const size_t f16_bytes = ra.stats.kv_bytes_by_format[low_rank];
  const size_t int4_bytes = rb.stats.kv_bytes_by_format[low_rank];
  CAPTURE(f16_bytes, int4_bytes);
  CHECK(int4_bytes * 2 < f16_bytes);  // a 16-frame block: Vᵀ, per block, still weighs in
  CHECK(rb.stats.low_rank_tokens == ra.stats.low_rank_tokens);
}

TEST_CASE("attentionpack stores every layer's visual rows as a low-rank block",
          "[unit][engine][compress]") {
  const llm::Decoder& dec = testing::ShippedEngine().decoder();
  const int64_t t = kPrefillRows;
  // regroup=1: the grouping follows the importance every step (checked after the last one).
  auto seq = PrefilledSequence("attentionpack:regroup=1", 5);
  const kv::SequenceKv& kv = seq->kv;
  for (int l = 0; l < kv.num_layers(); ++l) {
    INFO("layer " << l);
    REQUIRE(kv.low_rank_blocks(l).size() == 1);
    const kv::LowRankBlock& b = kv.low_rank_blocks(l)[0];
    CHECK(b.tokens() == 120);
    CHECK(b.keys.rank == 8);
    CHECK(b.values.rank == 16);
    CHECK(kv.page_tokens(l) == 18);  // the text rows only
    CHECK(kv.num_tokens(l) == t);
    std::vector<int32_t> all(static_cast<size_t>(t));
    std::iota(all.begin(), all.end(), 0);
    std::vector<int32_t> got = kv.positions(l);
    std::sort(got.begin(), got.end());
    CHECK(got == all);
  }
  CHECK(kv.low_rank_bytes() > 0);

  // Decode: importance accumulates and a quarter of the tokens get full-rank values.
  int32_t token = 5;
  llm::Sequence* const one[] = {seq.get()};
  for (int step = 0; step < 4; ++step) {
    auto out = dec.DecodeStep(one, std::span(&token, 1));
    REQUIRE(out.ok());
  }
  for (int l = 0; l < kv.num_layers(); ++l) {
    const kv::LowRankBlock& b = kv.low_rank_blocks(l)[0];
    const auto full = std::count(b.value_ranks.begin(), b.value_ranks.end(), b.values.rank);
    const auto quarter = std::count(b.value_ranks.begin(), b.value_ranks.end(), b.values.rank / 4);
    CHECK(full == 30);  // ceil(0.25 · 120)
    CHECK(quarter == 90);
    // The full-rank tokens are the most attended ones.
    float lowest_full = 1, highest_rest = 0;
    for (size_t i = 0; i < b.value_ranks.size(); ++i) {
      if (b.value_ranks[i] == b.values.rank) {
        lowest_full = std::min(lowest_full, b.importance[i]);
      } else {
        highest_rest = std::max(highest_rest, b.importance[i]);
      }
    }
    CHECK(lowest_full >= highest_rest);
    CHECK(kv.page_tokens(l) == 18 + 4);  // decode tokens go to pages
  }
}

TEST_CASE(
    "zipvl+attentionpack packs the visual rows ZipVL keeps and leaves the rest in low-bit pages",
    "[unit][engine][compress]") {
  const int64_t t = kPrefillRows;
  // keep_recent=0 and a low tau: ZipVL's important set is well short of every visual row.
  const auto seq = PrefilledSequence("zipvl+attentionpack:tau=0.5,keep_recent=0,min_tokens=1", 7);
  const kv::SequenceKv& kv = seq->kv;
  int64_t packed = 0;
  for (int l = 0; l < kv.num_layers(); ++l) {
    INFO("layer " << l);
    REQUIRE(kv.low_rank_blocks(l).size() == 1);
    const kv::LowRankBlock& b = kv.low_rank_blocks(l)[0];
    CHECK(b.tokens() > 0);
    CHECK(b.tokens() < 120);
    for (const int32_t p : b.positions.Expand()) {
      CHECK(p >= 8);
      CHECK(p < 128);
    }
    // Nothing is evicted (low_bits=2): pages hold the text and the visual rows left out.
    CHECK(kv.page_tokens(l) + b.tokens() == t);
    packed += b.tokens();
  }
  const auto by_format = kv.bytes_by_format();
  CHECK(by_format[static_cast<size_t>(kv::KvFormat::kLowRank)] > 0);
  CHECK(by_format[static_cast<size_t>(kv::KvFormat::kInt2)] > 0);  // ZipVL's U
  CHECK(packed < 4 * 120);
}

TEST_CASE("attentionpack recompresses text and generated tokens past T_p into more blocks",
          "[unit][engine][compress]") {
  const llm::Decoder& dec = testing::ShippedEngine().decoder();
  auto run = [&](const char* policy) {
    auto seq = PrefilledSequence(policy, 11);
    llm::Sequence* const one[] = {seq.get()};
    for (int32_t step = 0; step < 40; ++step) {
      const int32_t token = 5 + step;
      auto out = dec.DecodeStep(one, std::span(&token, 1));
      INFO((out.ok() ? "" : MessageOf(out.status())));
      REQUIRE(out.ok());
    }
    return seq;
  };
  const auto dense = run("none");
  const auto packed = run("attentionpack:recompress=16");
  const kv::SequenceKv& a = dense->kv;
  const kv::SequenceKv& b = packed->kv;
  for (int l = 0; l < b.num_layers(); ++l) {
    INFO("layer " << l);
    // The video's block, then the window each time a decode step's write fills it: the 18 text
    // tokens and the first decode token (19), then 16 and 16 decode tokens, leaving 7 in pages.
    CHECK(b.low_rank_blocks(l).size() == 4);
    CHECK(b.page_tokens(l) == 7);
    CHECK(b.num_tokens(l) == a.num_tokens(l));
    std::vector<int32_t> pa = a.positions(l), pb = b.positions(l);
    std::sort(pa.begin(), pa.end());
    std::sort(pb.begin(), pb.end());
    CHECK(pa == pb);
  }
  CHECK(b.bytes() < a.bytes());
}

TEST_CASE("attentionpack sequences decoded in one batch match each decoded alone",
          "[unit][engine][compress]") {
  const llm::Decoder& dec = testing::ShippedEngine().decoder();
  // Three sequences, one without blocks (none), decoded together and then one by one.
  const char* policies[] = {"attentionpack", "attentionpack:factors=int4", "none"};
  std::vector<std::unique_ptr<llm::Sequence>> together, alone;
  for (uint64_t i = 0; i < 3; ++i) {
    together.push_back(PrefilledSequence(policies[i], 20 + i));
    alone.push_back(PrefilledSequence(policies[i], 20 + i));
  }
  std::vector<llm::Sequence*> batch = {together[0].get(), together[1].get(), together[2].get()};
  for (int32_t step = 0; step < 3; ++step) {
    const std::vector<int32_t> tokens = {7 + step, 11 + step, 13 + step};
    auto joint = dec.DecodeStep(batch, tokens);
    REQUIRE(joint.ok());
    for (size_t i = 0; i < 3; ++i) {
      llm::Sequence* const one[] = {alone[i].get()};
      auto single = dec.DecodeStep(one, std::span(&tokens[i], 1));
      REQUIRE(single.ok());
      auto row = joint->Slice(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1);
      REQUIRE(row.ok());
      CAPTURE(step, i);
      // A batch of rows goes through the GEMM, one row through the GEMV: rounding differs.
      CHECK(testing::MaxAbsDiff(*row, *single) < 1e-4 * MaxAbs(*single));
    }
  }
}

// A decode step hands the policy each block's statistics once, when its layers are done: every
// layer's probabilities go to one buffer on the decoder's device, which comes to the host in one
// copy at the end of the step (on the CPU a memcpy, counted as a GPU's copy would be).
TEST_CASE("attentionpack's decode statistics reach the policy once per block and step",
          "[unit][engine][compress]") {
  const llm::Decoder& dec = testing::ShippedEngine().decoder();
  const auto seq = PrefilledSequence("attentionpack:regroup=2", 31);
  const int layers = seq->kv.num_layers();
  for (int l = 0; l < layers; ++l) REQUIRE(seq->kv.low_rank_blocks(l).size() == 1);
  llm::Sequence* const one[] = {seq.get()};
  for (uint32_t step = 1; step <= 5; ++step) {
    const int32_t token = static_cast<int32_t>(40 + step);
    const StepCountScope scope;
    auto logits = dec.DecodeStep(one, std::span(&token, 1));
    REQUIRE(logits.ok());
    const StepCounts counts = scope.Elapsed();
    CAPTURE(step);
    CHECK(counts.device_to_host == 1);  // the step's probabilities, all layers in one copy
    CHECK(counts.host_syncs == 0);
    CHECK(seq->low_rank_statistics.empty());  // settled before DecodeStep returned
    for (int l = 0; l < layers; ++l) {
      const kv::LowRankBlock& b = seq->kv.low_rank_blocks(l)[0];
      CAPTURE(l);
      CHECK(b.decode_steps == step);
      // An EMA of probabilities from 0: a positive total of at most 1.
      const double total = std::accumulate(b.importance.begin(), b.importance.end(), 0.0);
      CHECK(total > 0);
      CHECK(total <= 1 + 1e-5);
      // Regrouped at steps 0, 2, 4: a quarter of the tokens (rounded up) at full rank.
      const auto full = std::count(b.value_ranks.begin(), b.value_ranks.end(),
                                   static_cast<uint16_t>(b.values.rank));
      CHECK(full == static_cast<int64_t>(std::ceil(0.25 * static_cast<double>(b.tokens()))));
    }
  }

  // A batch: one copy per sequence that holds blocks, every one settled in the same step.
  const auto other = PrefilledSequence("attentionpack:factors=int4", 32);
  const auto plain = PrefilledSequence("none", 33);
  llm::Sequence* const batch[] = {seq.get(), plain.get(), other.get()};
  const std::vector<int32_t> tokens = {50, 51, 52};
  const StepCountScope scope;
  auto logits = dec.DecodeStep(batch, tokens);
  REQUIRE(logits.ok());
  CHECK(scope.Elapsed().device_to_host == 2);
  for (const llm::Sequence* s : {seq.get(), other.get()}) {
    CHECK(s->low_rank_statistics.empty());
    CHECK(s->kv.low_rank_blocks(0)[0].decode_steps == (s == seq.get() ? 6u : 1u));
  }
}

TEST_CASE("attentionpack turn stats report low-rank bytes, ranks and time",
          "[unit][engine][compress]") {
  runtime::Engine& eng = testing::ShippedEngine();
  const runtime::TurnResult a = VideoTurn("none", 6);
  const runtime::TurnResult b = VideoTurn("attentionpack", 6);
  const runtime::TurnStats& st = b.stats;
  const int64_t layers = eng.config().text.num_hidden_layers;
  CHECK(st.low_rank_tokens == layers * st.visual_tokens);
  CHECK(st.low_rank_key_rank == Approx(8));
  CHECK(st.low_rank_value_rank_mean > 4);
  CHECK(st.low_rank_value_rank_mean < 16);
  CHECK(st.low_rank_build_ms > 0);
  CHECK(st.low_rank_attend_ms > 0);
  const auto low_rank = static_cast<size_t>(kv::KvFormat::kLowRank);
  CHECK(st.kv_bytes_by_format[low_rank] > 0);
  CHECK(std::accumulate(st.kv_bytes_by_format.begin(), st.kv_bytes_by_format.end(), size_t{0}) ==
        st.kv_bytes);
  CHECK(st.kv_bytes < a.stats.kv_bytes);
  CHECK(st.compression_ratio > a.stats.compression_ratio);
}

TEST_CASE("An attentionpack conversation survives the page codec and continues alike",
          "[unit][engine][compress]") {
  const char* policy = GENERATE("attentionpack", "attentionpack:factors=int4",
                                "zipvl+attentionpack:tau=0.5,keep_recent=8,min_tokens=1",
                                "attentionpack:recompress=16,min_tokens=1");
  CAPTURE(policy);
  runtime::Engine& eng = testing::ShippedEngine();
  const runtime::Message m =
      testing::SyntheticVideoMessage(16, eng.image_size(), "What color is the cross?");
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 5;
  opt.ignore_eos = true;
  auto c = *eng.NewConversation(policy);
  REQUIRE(eng.RunTurn(*c, std::span(&m, 1), opt).ok());
  auto seg = eng.ExportConversation(*c, kv::SegmentMark{}, 1 << 13);
  REQUIRE(seg.ok());
  CHECK(seg->encoded.blocks.size() > 1);  // split over several store blocks
  auto decoded = kv::DecodeSegment(seg->encoded.blocks);
  INFO((decoded.ok() ? "" : MessageOf(decoded.status())));
  REQUIRE(decoded.ok());
  for (const kv::DecodedLayer& layer : decoded->layers) CHECK(!layer.blocks.empty());
  auto restored = eng.RestoreConversation(std::span(&*decoded, 1));
  INFO((restored.ok() ? "" : MessageOf(restored.status())));
  REQUIRE(restored.ok());
  const runtime::Message follow{"user", "And what shape was it?", {}};
  auto a = eng.RunTurn(*c, std::span(&follow, 1), opt);
  auto b = eng.RunTurn(*restored->conversation, std::span(&follow, 1), opt);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->token_ids == b->token_ids);

  // A block whose RoPE is not the model's (another model's segment, checksums intact) is refused
  // at restore instead of attending with other angles.
  for (const double theta : {5e5, 0.0, -1.0, std::nan("")}) {
    kv::DecodedSegment other = *decoded;
    other.layers.back().blocks.front().rope.theta = theta;
    auto refused = eng.RestoreConversation(std::span(&other, 1));
    REQUIRE_FALSE(refused.ok());
    CHECK(absl::IsDataLoss(refused.status()));
    CHECK_THAT(MessageOf(refused.status()), Catch::Contains("RoPE"));
  }

  // A flipped byte anywhere is caught by the checksums.
  std::vector<std::string> broken = seg->encoded.blocks;
  broken[0][broken[0].size() / 2] ^= 0x40;
  auto bad = kv::DecodeSegment(broken);
  REQUIRE_FALSE(bad.ok());
  CHECK(absl::IsDataLoss(bad.status()));
}

}  // namespace
}  // namespace framezip::engine
