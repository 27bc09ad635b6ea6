// The decode residual window (docs/methods.md §1.2, KIVI's R) through Decoder::DecodeStep, and the
// kivi policy that uses it.
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "engine/compress/policy.h"
#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/runtime/decoder_loading.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "engine/synthetic/random_model_weights.h"
#include "tests/testing/random.h"

namespace framezip::engine {
namespace {

using kv::KvFormat;

model::TextConfig Config() {
  model::TextConfig c;
  c.arch = model::TextArch::kQwen2;
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;  // int4/int2 pages need 32-channel groups
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1e6;
  c.qkv_bias = true;
  c.tie_word_embeddings = true;
  return c;
}

int64_t TokensOf(const kv::SequenceKv& kv, int layer, KvFormat f) {
  int64_t n = 0;
  for (const kv::PageRef& p : kv.pages(layer)) n += p.format == f ? p.num_tokens : 0;
  return n;
}

TEST_CASE("The residual window is recompressed exactly when it holds R tokens",
          "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const auto config = Config();
  auto weights = *runtime::MakeRandomDecoderWeights(config, DType::kF32, rng(), 0.15f);
  auto dec = *runtime::CreateDecoder(config, weights.weights);
  const auto formats = kv::StorableFormats();
  auto pools = *kv::KvPools::Create(dec->KvLayout(KvFormat::kF16, 8), formats, 64 << 20);
  constexpr int kWindow = 5;
  auto seq = *dec->NewSequence(*pools, KvFormat::kF16, "kivi:window=5");
  REQUIRE(seq->policy->ResidualWindow() == kWindow);
  std::uniform_int_distribution<int32_t> id(0, 96);
  std::vector<int32_t> prompt(20);
  for (auto& t : prompt) t = id(rng);
  REQUIRE(dec->Prefill(*seq, *dec->Embed(prompt)).ok());
  for (int l = 0; l < 2; ++l) {
    CHECK(seq->kv.full_tokens(l) == 0);
    CHECK(TokensOf(seq->kv, l, KvFormat::kInt2) == 20);
  }
  llm::Sequence* batch[] = {seq.get()};
  for (int step = 1; step <= 2 * kWindow + 2; ++step) {
    const int32_t token = id(rng);
    auto logits = dec->DecodeStep(batch, std::span<const int32_t>(&token, 1));
    REQUIRE(logits.ok());
    CAPTURE(step);
    for (int l = 0; l < 2; ++l) {
      // Full precision until the window fills, then everything moves to int2 at once.
      CHECK(seq->kv.full_tokens(l) == step % kWindow);
      CHECK(TokensOf(seq->kv, l, KvFormat::kInt2) == 20 + (step / kWindow) * kWindow);
      CHECK(seq->kv.num_tokens(l) == 20 + step);
    }
  }
  // The window's full pages were given back: only the partial window's page remains in f16.
  CHECK(pools->pool(KvFormat::kF16)->pages_in_use() == 2);
}

TEST_CASE("No residual recompression without a window", "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const auto config = Config();
  auto weights = *runtime::MakeRandomDecoderWeights(config, DType::kF32, rng(), 0.15f);
  auto dec = *runtime::CreateDecoder(config, weights.weights);
  auto pools =
      *kv::KvPools::Create(dec->KvLayout(KvFormat::kF32, 8), kv::StorableFormats(), 64 << 20);
  auto seq = *dec->NewSequence(*pools, KvFormat::kF32, "none");
  REQUIRE(dec->Prefill(*seq, *dec->Embed(std::vector<int32_t>{1, 2, 3})).ok());
  llm::Sequence* batch[] = {seq.get()};
  for (int step = 0; step < 140; ++step) {
    const int32_t token = step % 97;
    REQUIRE(dec->DecodeStep(batch, std::span<const int32_t>(&token, 1)).ok());
  }
  CHECK(seq->kv.full_tokens(0) == 143);
  CHECK(pools->pool(KvFormat::kInt2)->pages_in_use() == 0);
}

TEST_CASE("kivi policies: formats, window and options", "[unit][engine][kv]") {
  auto two = *compress::CreatePolicy("kivi");
  CHECK(two->name() == "kivi");
  CHECK(two->ResidualWindow() == 128);
  CHECK(two->Precision(KvFormat::kF16).important == KvFormat::kInt2);
  CHECK(two->Precision(KvFormat::kF16).rest == KvFormat::kInt2);
  CHECK(two->Precision(KvFormat::kF32).full == KvFormat::kF32);
  auto four = *compress::CreatePolicy("kivi4");
  CHECK(four->Precision(KvFormat::kF16).important == KvFormat::kInt4);
  CHECK((*compress::CreatePolicy("kivi:bits=4"))->Precision(KvFormat::kF16).rest ==
        KvFormat::kInt4);
  CHECK((*compress::CreatePolicy("kivi4:bits=2"))->Precision(KvFormat::kF16).rest ==
        KvFormat::kInt2);
  CHECK(compress::CreatePolicy("kivi:bits=3").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(compress::CreatePolicy("kivi:widow=3").status().code() ==
        absl::StatusCode::kInvalidArgument);
  // Prefill: every token kImportant.
  std::vector<uint8_t> classes(9, kv::kFull);
  REQUIRE(two->OnPrefillLayer(compress::PrefillLayerInputs{}, classes).ok());
  for (auto c : classes) CHECK(c == kv::kImportant);
}

}  // namespace
}  // namespace framezip::engine
