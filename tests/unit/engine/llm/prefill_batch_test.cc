// Decoder::PrefillBatch (continuous batching's one-pass prefill of several sequences) against
// separate Decoder::Prefill calls on twin sequences: same logits, same KV contents, same policy
// statistics, for sequences of different lengths, cached prefixes, chunking and policies.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/ops/gemm_amx.h"
#include "engine/runtime/decoder_loading.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "engine/synthetic/random_model_weights.h"
#include "tests/testing/random.h"
#include "tests/testing/tiny_decoder.h"

namespace framezip::engine::llm {
namespace {

model::TextConfig Config() { return testing::TinyQwen2Config(); }
using testing::RandomEmbeds;

// One sequence of the batch: its policy, cached prefix, new input and options.
struct Case {
  std::string policy;
  int64_t past = 0;  // tokens prefilled (separately) before the batch
  int64_t tokens = 0;
  int64_t chunk = 0;
  bool all_logits = false;
  bool visual = false;  // mark the middle half of the input as visual rows (fastv prunes them)
};

// max |a - b| over max(1, max |b|): the error relative to the logits' scale.
double RelativeError(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double err = 0, scale = 1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    err = std::max<double>(err, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
    scale = std::max<double>(scale, std::fabs(b.data<float>()[i]));
  }
  return err / scale;
}

TEST_CASE("PrefillBatch equals separate prefills: logits, KV and policy stats",
          "[unit][engine][llm]") {
  ops::cpu::ScopedF32Gemm f32_gemm;  // batch shapes: see gemm_amx.h
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const auto config = Config();
  auto weights = *runtime::MakeRandomDecoderWeights(config, DType::kBF16, rng(), 0.3f);
  auto dec = *runtime::CreateDecoder(config, weights.weights);
  auto pools = *kv::KvPools::Create(dec->KvLayout(kv::KvFormat::kF32, 8), kv::StorableFormats(),
                                    int64_t{256} << 20);
  const int64_t hid = config.hidden_size;
  // Alternating the order checks that a sequence's result does not depend on its row offset.
  // zipvl keeps every class at full precision here: batching changes the GEMM's row count and so
  // f32 rounding, and an int2/int4 page turns a rounding-level difference at a quantization
  // boundary into a whole step, which no tolerance on the KV contents would separate from a bug.
  // Its token selection, sparse attention and statistics are what is checked.
  std::vector<Case> cases = {
      {"none", 0, 23, 0, false, false},
      {"none", 11, 9, 0, true, false},
      {"zipvl:tau=0.8,keep_recent=8,high_bits=16,low_bits=16", 0, 100, 40, false, false},
      {"fastv:k=1,r=0.5", 6, 40, 0, false, true},
  };
  if (GENERATE(false, true)) std::reverse(cases.begin(), cases.end());

  std::vector<std::unique_ptr<Sequence>> batched, separate;
  std::vector<Tensor> inputs;
  std::vector<std::vector<uint8_t>> visual(cases.size());
  std::vector<PrefillOptions> options;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    CAPTURE(c.policy);
    const Tensor past = RandomEmbeds(std::max<int64_t>(c.past, 1), hid, rng);
    for (auto* group : {&batched, &separate}) {
      group->push_back(*dec->NewSequence(*pools, kv::KvFormat::kF32, c.policy));
      if (c.past > 0) REQUIRE(dec->Prefill(*group->back(), past).ok());
      group->back()->prefill_stats.Reset(static_cast<int>(config.num_hidden_layers));
    }
    inputs.push_back(RandomEmbeds(c.tokens, hid, rng));
    if (c.visual) {
      visual[i].assign(static_cast<size_t>(c.tokens), 0);
      std::fill(visual[i].begin() + c.tokens / 4, visual[i].begin() + 3 * c.tokens / 4, 1);
    }
    options.push_back(
        PrefillOptions{.chunk_tokens = c.chunk, .all_logits = c.all_logits, .visual = visual[i]});
  }
  std::vector<Sequence*> seqs;
  for (auto& s : batched) seqs.push_back(s.get());
  auto got = dec->PrefillBatch(seqs, inputs, options);
  REQUIRE(got.ok());
  REQUIRE(got->size() == cases.size());

  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    CAPTURE(c.policy, c.past, c.tokens);
    auto want = dec->Prefill(*separate[i], inputs[i], options[i]);
    REQUIRE(want.ok());
    CHECK((*got)[i].dim(0) == (c.all_logits ? c.tokens : 1));
    CHECK(RelativeError((*got)[i], *want) <= 1e-4);

    const Sequence& a = *batched[i];
    const Sequence& b = *separate[i];
    CHECK(a.length == c.past + c.tokens);
    CHECK(a.length == b.length);
    CHECK(a.prefill_stats.tokens == b.prefill_stats.tokens);
    CHECK(a.prefill_stats.kept == b.prefill_stats.kept);
    for (int l = 0; l < config.num_hidden_layers; ++l) {
      CAPTURE(l);
      REQUIRE(a.kv.num_tokens(l) == b.kv.num_tokens(l));
      CHECK(a.kv.bytes_by_format() == b.kv.bytes_by_format());
      const size_t n = static_cast<size_t>(a.kv.num_tokens(l) * config.kv_dim());
      std::vector<float> ka(n), va(n), kb(n), vb(n);
      REQUIRE(a.kv.Gather(l, ka.data(), va.data()).ok());
      REQUIRE(b.kv.Gather(l, kb.data(), vb.data()).ok());
      // Relative to the cache's scale: int4/int2 pages amplify f32 rounding through their scales.
      double err = 0, scale = 1;
      for (size_t j = 0; j < n; ++j) {
        err = std::max<double>(err, std::fabs(ka[j] - kb[j]));
        err = std::max<double>(err, std::fabs(va[j] - vb[j]));
        scale = std::max<double>(scale, std::max(std::fabs(kb[j]), std::fabs(vb[j])));
      }
      CHECK(err / scale <= 1e-4);
    }
  }
  // A compressing policy really ran in the batch (the test would not see its plan otherwise).
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].policy.rfind("zipvl", 0) == 0) {
      const compress::PrefillStats& st = batched[i]->prefill_stats;
      CAPTURE(st.kept, st.tokens);
      CHECK(st.kept != st.tokens);
    }
  }
}

TEST_CASE("PrefillBatch rejects mismatched inputs", "[unit][engine][llm]") {
  std::mt19937_64 rng(testing::TestSeed());
  const auto config = Config();
  auto weights = *runtime::MakeRandomDecoderWeights(config, DType::kF32, rng(), 0.3f);
  auto dec = *runtime::CreateDecoder(config, weights.weights);
  auto pools = *kv::KvPools::Create(dec->KvLayout(kv::KvFormat::kF32, 8), kv::StorableFormats(),
                                    int64_t{64} << 20);
  auto seq = *dec->NewSequence(*pools, kv::KvFormat::kF32, "none");
  const Tensor e = RandomEmbeds(4, config.hidden_size, rng);
  Sequence* twice[] = {seq.get(), seq.get()};
  const Tensor two[] = {e, e};
  CHECK(dec->PrefillBatch(twice, two).status().code() == absl::StatusCode::kInvalidArgument);
  Sequence* one[] = {seq.get()};
  CHECK(dec->PrefillBatch(one, two).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(seq->length == 0);
}

}  // namespace
}  // namespace framezip::engine::llm
