// The decoder's sparse prefill path end to end on a random tiny model: zipvl with τ = 1 (every
// token important) gives the dense logits, one-shot and chunked; a real τ keeps fewer tokens,
// differently per layer, and reports it; fastv drops visual tokens from layer K on.
#include <catch2/catch.hpp>

#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/runtime/decoder_loading.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "engine/synthetic/random_model_weights.h"
#include "tests/testing/random.h"
#include "tests/testing/tiny_decoder.h"

namespace framezip::engine::llm {
namespace {

struct Tiny {
  RandomDecoderWeights random;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<kv::KvPools> pools;

  std::unique_ptr<Sequence> NewSequence(std::string_view policy) const {
    auto seq = decoder->NewSequence(*pools, kv::KvFormat::kF32, policy);
    REQUIRE(seq.ok());
    return std::move(*seq);
  }
};

Tiny MakeTiny(uint64_t seed) {
  const model::TextConfig c = testing::TinyQwen2Config(/*vocab_size=*/64);
  Tiny t;
  t.random = *runtime::MakeRandomDecoderWeights(c, DType::kF32, seed, 0.3f);
  t.decoder = *runtime::CreateDecoder(c, t.random.weights);
  const kv::KvFormat formats[] = {kv::KvFormat::kF32, kv::KvFormat::kInt4, kv::KvFormat::kInt2};
  t.pools = *kv::KvPools::Create(t.decoder->KvLayout(kv::KvFormat::kF32, 32), formats,
                                 int64_t{256} << 20);
  return t;
}

using testing::RandomEmbeds;

TEST_CASE("Sparse prefill with every token important equals dense prefill", "[unit][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  Tiny m = MakeTiny(rng());
  const int64_t n = 150;
  const Tensor embeds = RandomEmbeds(n, 128, rng);
  const int64_t chunk = GENERATE(0, 64);
  auto dense_seq = m.NewSequence("none");
  const Tensor dense =
      *m.decoder->Prefill(*dense_seq, embeds, {.chunk_tokens = chunk, .all_logits = true});
  // high_bits=16: the important (here: every) token is stored unquantized, so later chunks see
  // exactly the dense K/V.
  const std::string policy =
      GENERATE("zipvl:tau=1,high_bits=16", "zipvl:tau=1,high_bits=16,per_head=1,u_rows=attend");
  auto seq = m.NewSequence(policy);
  const Tensor sparse =
      *m.decoder->Prefill(*seq, embeds, {.chunk_tokens = chunk, .all_logits = true});
  double max_err = 0;
  for (int64_t i = 0; i < dense.numel(); ++i) {
    max_err = std::max<double>(max_err, std::abs(sparse.data<float>()[i] - dense.data<float>()[i]));
  }
  CHECK(max_err < 2e-5);
  for (int l = 0; l < 3; ++l) {
    CHECK(seq->prefill_stats.tokens[l] == n);
    CHECK(seq->prefill_stats.kept[l] == n);
  }
}

TEST_CASE("ZipVL prefill keeps fewer tokens per layer and reports them", "[unit][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  Tiny m = MakeTiny(rng());
  const int64_t n = 300;
  const Tensor embeds = RandomEmbeds(n, 128, rng);
  const bool evict = GENERATE(false, true);
  auto seq = m.NewSequence(evict ? "zipvl:tau=0.8,low_bits=evict" : "zipvl:tau=0.8");
  REQUIRE(m.decoder->Prefill(*seq, embeds).ok());
  const std::vector<float> ratios = seq->prefill_stats.KeptRatios();
  REQUIRE(ratios.size() == 3);
  for (int l = 0; l < 3; ++l) {
    CHECK(ratios[l] > 0.f);
    CHECK(ratios[l] < 1.f);
    CHECK(seq->kv.num_tokens(l) == (evict ? seq->prefill_stats.kept[l] : n));
  }
  CHECK(seq->prefill_stats.selection_ms > 0);
}

TEST_CASE("FastV stores only the kept visual tokens from layer K on", "[unit][compress]") {
  std::mt19937_64 rng(testing::TestSeed());
  Tiny m = MakeTiny(rng());
  const int64_t n = 100;
  const Tensor embeds = RandomEmbeds(n, 128, rng);
  std::vector<uint8_t> visual(n, 0);
  for (int64_t i = 5; i < 85; ++i) visual[i] = 1;
  auto seq = m.NewSequence("fastv:k=1,r=0.5");
  REQUIRE(m.decoder->Prefill(*seq, embeds, {.visual = visual}).ok());
  CHECK(seq->kv.num_tokens(0) == n);
  CHECK(seq->kv.num_tokens(1) == n - 40);
  CHECK(seq->kv.num_tokens(2) == n - 40);
  auto mismatched = m.NewSequence("fastv");
  CHECK_FALSE(m.decoder->Prefill(*mismatched, embeds, {.visual = std::span(visual).first(3)}).ok());
}

}  // namespace
}  // namespace framezip::engine::llm
