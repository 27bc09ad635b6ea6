// dense::DenseDecoder on the CPU against llm::Decoder (itself checked against an f64 forward pass
// and transformers): the same logits for prefill, prefill continued on a cache and batched decode,
// on random Qwen2- and Llama-style models and on the shipped framezip-tiny-video; and its errors.
// The GPU side of the same class is compared with this CPU run in dense_decoder_cuda_test.cc.
#include "engine/dense/dense_decoder.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "engine/core/thread_pool.h"
#include "engine/llm/decoder.h"
#include "engine/llm/dense_adapter.h"
#include "engine/llm/random_weights.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "tests/testing/random.h"
#include "tests/testing/tiny_decoder.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::llm {
namespace {

using testing::ToFloatVector;

// Row-wise comparison of logits [n, V]: every element within 1e-4 of the row's largest magnitude
// (both run f32 activations over the same weights; only the attention kernels differ: paged
// decode vs blocked prefill, f32 KV in both), and the same argmax.
void CheckLogits(const Tensor& dense_logits, const Tensor& ref_logits) {
  REQUIRE(dense_logits.shape() == ref_logits.shape());
  const auto got = ToFloatVector(dense_logits);
  const auto want = ToFloatVector(ref_logits);
  const int64_t rows = ref_logits.dim(0), v = ref_logits.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = got.data() + r * v;
    const float* w = want.data() + r * v;
    float scale = 0;
    for (int64_t i = 0; i < v; ++i) scale = std::max(scale, std::abs(w[i]));
    REQUIRE(scale > 0);
    double worst = 0;
    for (int64_t i = 0; i < v; ++i) worst = std::max(worst, std::abs(double(g[i]) - w[i]));
    INFO("row " << r << ": max |dense - decoder| " << worst << " at logit scale " << scale);
    CHECK(worst <= 1e-4 * scale);
    CHECK(std::max_element(g, g + v) - g == std::max_element(w, w + v) - w);
  }
}

std::vector<int32_t> RandomIds(int64_t n, int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = pick(rng);
  return ids;
}

// Runs the same script on both decoders: sequence A prefills `a` ids in two pieces (the second
// attends to the first through the cache), B prefills `b` ids at once, then `steps` batched
// decode steps feed each sequence its own greedy token. The dense cache's pages hold
// `page_tokens` tokens, so chunks and decode steps start and end inside pages.
void CompareOnScript(const model::TextConfig& config, const DecoderWeights& weights,
                     std::mt19937_64& rng, int64_t a, int64_t b, int steps, int page_tokens = 16) {
  auto ref = Decoder::Create(config, weights);
  REQUIRE(ref.ok());
  auto pool = *kv::PagePool::Create((*ref)->KvLayout(kv::KvFormat::kF32, 16), 256);
  auto ref_a = *(*ref)->NewSequence(pool.get());
  auto ref_b = *(*ref)->NewSequence(pool.get());

  auto dense =
      dense::DenseDecoder::Create(DenseShapeOf(config), DenseTensorsOf(weights), Device::Cpu(),
                                  {.page_tokens = page_tokens, .max_bytes = int64_t{64} << 20});
  INFO((dense.ok() ? "" : MessageOf(dense.status())));
  REQUIRE(dense.ok());
  auto cache_a = *(*dense)->NewCache(a + b + steps);
  auto cache_b = *(*dense)->NewCache(b + steps);

  const auto ids_a = RandomIds(a, config.vocab_size, rng);
  const auto ids_b = RandomIds(b, config.vocab_size, rng);
  const int64_t split = a / 3;
  const std::span<const int32_t> a0(ids_a.data(), split), a1(ids_a.data() + split, a - split);

  REQUIRE((*ref)->Prefill(*ref_a, *(*ref)->Embed(a0)).ok());
  auto ref_la = (*ref)->Prefill(*ref_a, *(*ref)->Embed(a1));
  auto ref_lb = (*ref)->Prefill(*ref_b, *(*ref)->Embed(ids_b));
  REQUIRE(ref_la.ok());
  REQUIRE(ref_lb.ok());
  REQUIRE((*dense)->Prefill(*cache_a, a0).ok());
  auto la = (*dense)->Prefill(*cache_a, a1);
  auto lb = (*dense)->Prefill(*cache_b, ids_b);
  REQUIRE(la.ok());
  REQUIRE(lb.ok());
  CheckLogits(*la, *ref_la);
  CheckLogits(*lb, *ref_lb);
  CHECK(cache_a->length() == a);
  CHECK(cache_b->length() == b);

  auto argmax = [&](const Tensor& logits, int64_t row) {
    const float* p = logits.data<float>() + row * logits.dim(1);
    return static_cast<int32_t>(std::max_element(p, p + logits.dim(1)) - p);
  };
  std::vector<int32_t> tokens = {argmax(*ref_la, 0), argmax(*ref_lb, 0)};
  for (int s = 0; s < steps; ++s) {
    CAPTURE(s);
    Sequence* ref_seqs[] = {ref_a.get(), ref_b.get()};
    dense::KvCache* caches[] = {cache_a.get(), cache_b.get()};
    auto want = (*ref)->DecodeStep(ref_seqs, tokens);
    auto got = (*dense)->DecodeStep(caches, tokens);
    REQUIRE(want.ok());
    REQUIRE(got.ok());
    CheckLogits(*got, *want);
    tokens = {argmax(*want, 0), argmax(*want, 1)};
  }
  CHECK(cache_a->length() == a + steps);
  // Every layer holds exactly the pages its tokens need, and gives them back when dropped.
  const int64_t pages_a = (a + steps + page_tokens - 1) / page_tokens;
  const int64_t pages_b = (b + steps + page_tokens - 1) / page_tokens;
  CHECK((*dense)->kv_pool().pages_in_use() == (pages_a + pages_b) * config.num_hidden_layers);
  cache_a.reset();
  cache_b.reset();
  CHECK((*dense)->kv_pool().pages_in_use() == 0);
}

// Prefill, prefill continued on the cache, batched decode.
TEST_CASE("DenseDecoder on the CPU matches llm::Decoder on random models", "[unit][engine][llm]") {
  SetComputeThreads(2);
  const bool qwen2 = GENERATE(true, false);
  const DType wdtype = GENERATE(DType::kF32, DType::kBF16);
  CAPTURE(qwen2, DTypeName(wdtype));
  std::mt19937_64 rng(testing::TestSeed());
  const model::TextConfig config = testing::TinyDecoderConfig(qwen2);
  auto random = MakeRandomDecoderWeights(config, wdtype, rng(), 0.15f);
  REQUIRE(random.ok());
  // 16: pages larger than a decode batch's growth; 5: every chunk crosses page boundaries.
  const int page_tokens = GENERATE(16, 5);
  CAPTURE(page_tokens);
  CompareOnScript(config, random->weights, rng, 41, 9, 4, page_tokens);
}

TEST_CASE("DenseDecoder on the CPU matches llm::Decoder on the shipped framezip-tiny-video",
          "[unit][engine][llm]") {
  SetComputeThreads(2);
  const char* src = std::getenv("FRAMEZIP_SOURCE_DIR");
  const std::filesystem::path dir =
      std::filesystem::path(src != nullptr ? src : ".") / "models/framezip-tiny-video";
  auto config = model::LoadLlavaConfig(dir);
  INFO(dir.string() << ": " << (config.ok() ? "" : MessageOf(config.status())));
  REQUIRE(config.ok());
  auto weights = model::ModelWeights::Load(dir, *config);
  REQUIRE(weights.ok());
  auto dw = DecoderWeightsFromModel(*weights, config->text);
  REQUIRE(dw.ok());
  std::mt19937_64 rng(testing::TestSeed());
  CompareOnScript(config->text, *dw, rng, 120, 33, 5);
}

TEST_CASE("DenseDecoder names what is wrong and leaves a cache unchanged on error",
          "[unit][engine][llm]") {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const model::TextConfig config = testing::TinyDecoderConfig(true);
  auto random = MakeRandomDecoderWeights(config, DType::kF32, rng(), 0.15f);
  REQUIRE(random.ok());

  SECTION("a weight of the wrong shape") {
    dense::DecoderTensors t = DenseTensorsOf(random->weights);
    t.layers[1].gate = t.layers[1].down;  // [H, I] where [I, H] belongs
    auto d = dense::DenseDecoder::Create(DenseShapeOf(config), t, Device::Cpu());
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(d.status().message()), Catch::Contains("layers.1.gate"));
  }
  SECTION("a full cache, a bad id, a repeated cache") {
    auto d = *dense::DenseDecoder::Create(DenseShapeOf(config), DenseTensorsOf(random->weights),
                                          Device::Cpu());
    auto cache = *d->NewCache(8);
    const std::vector<int32_t> six = RandomIds(6, config.vocab_size, rng);
    REQUIRE(d->Prefill(*cache, six).ok());

    auto over = d->Prefill(*cache, six);
    CHECK(over.status().code() == absl::StatusCode::kOutOfRange);
    CHECK_THAT(std::string(over.status().message()), Catch::Contains("6 of 8 used"));
    CHECK(cache->length() == 6);

    const std::vector<int32_t> bad = {3, static_cast<int32_t>(config.vocab_size)};
    auto out_of_vocab = d->Prefill(*cache, bad);
    CHECK_FALSE(out_of_vocab.ok());
    CHECK(cache->length() == 6);

    dense::KvCache* twice[] = {cache.get(), cache.get()};
    const int32_t tokens[] = {1, 2};
    auto repeated = d->DecodeStep(twice, tokens);
    CHECK(repeated.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(cache->length() == 6);

    // What is left still decodes, and the cache refuses the ninth token.
    dense::KvCache* one[] = {cache.get()};
    REQUIRE(d->DecodeStep(one, std::span<const int32_t>(tokens, 1)).ok());
    REQUIRE(d->DecodeStep(one, std::span<const int32_t>(tokens, 1)).ok());
    CHECK(d->DecodeStep(one, std::span<const int32_t>(tokens, 1)).status().code() ==
          absl::StatusCode::kOutOfRange);
    CHECK(cache->length() == 8);
  }
  SECTION("a cache of another decoder") {
    auto d1 = *dense::DenseDecoder::Create(DenseShapeOf(config), DenseTensorsOf(random->weights),
                                           Device::Cpu());
    auto d2 = *dense::DenseDecoder::Create(DenseShapeOf(config), DenseTensorsOf(random->weights),
                                           Device::Cpu());
    auto cache = *d1->NewCache(8);
    const auto st = d2->Prefill(*cache, RandomIds(3, config.vocab_size, rng)).status();
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(cache->length() == 0);
    CHECK(d2->kv_pool().pages_in_use() == 0);
  }
  SECTION("a pool that runs out of pages") {
    // Three 4-token pages per layer: one 8-token prefill takes two of each layer's, a second one
    // finds one left, is refused whole and leaves its cache and the pool as they were.
    const int64_t layers = config.num_hidden_layers;
    auto probe = *dense::DenseDecoder::Create(DenseShapeOf(config), DenseTensorsOf(random->weights),
                                              Device::Cpu(), {.page_tokens = 4});
    const int64_t page_bytes = static_cast<int64_t>(probe->kv_pool().layout().PageBytes());
    auto d = *dense::DenseDecoder::Create(DenseShapeOf(config), DenseTensorsOf(random->weights),
                                          Device::Cpu(),
                                          {.page_tokens = 4, .max_bytes = 3 * layers * page_bytes});
    REQUIRE(d->kv_pool().max_pages() == 3 * layers);
    const std::vector<int32_t> eight = RandomIds(8, config.vocab_size, rng);
    auto first = *d->NewCache(16);
    auto second = *d->NewCache(16);
    REQUIRE(d->Prefill(*first, eight).ok());
    CHECK(d->kv_pool().pages_in_use() == 2 * layers);
    auto refused = d->Prefill(*second, eight);
    CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(second->length() == 0);
    CHECK(second->bytes() == 0);
    CHECK(d->kv_pool().pages_in_use() == 2 * layers);
    first.reset();  // its pages go back to the pool
    CHECK(d->kv_pool().pages_in_use() == 0);
    REQUIRE(d->Prefill(*second, eight).ok());
    CHECK(second->length() == 8);
  }
}

}  // namespace
}  // namespace framezip::engine::llm
