// The Qwen2/Llama decoder against a naive f64 forward pass of the same random tiny model
// (decoder_reference.h), and its KV paths (chunked prefill, decode steps, batched decode) against
// one-shot prefill. The serving scenarios on every device: decoder_device_test.cc.
#include "engine/llm/decoder.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <optional>

#include "engine/core/half.h"
#include "engine/core/thread_pool.h"
#include "engine/llm/quantized_projections.h"
#include "engine/ops/gemm_amx.h"
#include "engine/runtime/decoder_loading.h"
#include "engine/runtime/weight_format.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "engine/synthetic/random_model_weights.h"
#include "tests/testing/tiny_decoder.h"
#include "tests/unit/engine/llm/decoder_reference.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::llm {
namespace {

using reference::RefForward;
using testing::ToFloatVector;

struct TinyModel {
  model::TextConfig config;
  RandomDecoderWeights random;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<kv::PagePool> pool;
};

TinyModel MakeTiny(bool qwen2, DType wdtype, kv::KvFormat format, uint64_t seed,
                   float stddev = 0.15f) {
  TinyModel m;
  m.config = testing::TinyDecoderConfig(qwen2);
  m.random = *runtime::MakeRandomDecoderWeights(m.config, wdtype, seed, stddev);
  auto dec = runtime::CreateDecoder(m.config, m.random.weights);
  FZ_CHECK(dec.ok());
  m.decoder = std::move(*dec);
  // Small pages (8 slots) so short tests still cross page boundaries.
  m.pool = *kv::PagePool::Create(m.decoder->KvLayout(format, 8), 4096);
  return m;
}

std::vector<int32_t> RandomIds(int n, int vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

TEST_CASE("Decoder prefill logits match a naive f64 forward pass", "[unit][engine][llm]") {
  SetComputeThreads(2);
  ops::cpu::ScopedF32Gemm f32_gemm;
  std::mt19937_64 rng(testing::TestSeed());
  const bool qwen2 = GENERATE(true, false);
  const DType wdtype = GENERATE(DType::kF32, DType::kBF16);
  CAPTURE(qwen2, DTypeName(wdtype));
  TinyModel m = MakeTiny(qwen2, wdtype, kv::KvFormat::kF32, rng());
  const auto ids = RandomIds(37, 97, rng);
  auto seq = *m.decoder->NewSequence(m.pool.get());
  auto embeds = *m.decoder->Embed(ids);
  auto logits = m.decoder->Prefill(*seq, embeds, PrefillOptions{.all_logits = true});
  REQUIRE(logits.ok());
  CHECK(seq->length == 37);
  CHECK(seq->kv.num_tokens(0) == 37);
  test::RequireClose(*logits, RefForward(m.config, m.random.weights, ids), 1e-4, 1e-4);
}

TEST_CASE("On the AMX path, prefill logits match f64 with bf16-rounded Linear inputs",
          "[unit][engine][llm]") {
  if (!ops::cpu::AmxGemmEnabled()) {
    WARN("SKIPPED: this CPU or OS offers no AMX-BF16 (or FRAMEZIP_NO_AMX=1)");
    return;
  }
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const bool qwen2 = GENERATE(true, false);
  CAPTURE(qwen2);
  TinyModel m = MakeTiny(qwen2, DType::kBF16, kv::KvFormat::kF32, rng());
  const auto ids = RandomIds(37, 97, rng);  // more than 16 rows: every Linear takes the AMX path
  auto seq = *m.decoder->NewSequence(m.pool.get());
  auto logits =
      m.decoder->Prefill(*seq, *m.decoder->Embed(ids), PrefillOptions{.all_logits = true});
  REQUIRE(logits.ok());
  // The reference rounds its f64 activations, the engine its f32 ones, and the two roundings part
  // where an activation lies within f32 error of a bf16 midpoint; each such value then differs by
  // one bf16 step (2^-8 relative), and a random model carries it on through the layers. So the
  // claim is on the RMS error relative to the logits' RMS, not value for value: a few 2^-8
  // steps: at most 3e-3 over 80 seeds (often 4e-8, no parted rounding at all); a wrong tile,
  // pair order or padding gives O(1).
  const auto got = ToFloatVector(*logits);
  const auto want = RefForward(m.config, m.random.weights, ids, true);
  REQUIRE(got.size() == want.size());
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err2 += (got[i] - want[i]) * (got[i] - want[i]);
    ref2 += want[i] * want[i];
  }
  const double relative_rms = std::sqrt(err2 / ref2);
  CAPTURE(relative_rms);
  CHECK(relative_rms <= 1.5e-2);
  // And closer to the rounded reference than to the plain f64 one, which it would not be if the
  // kernel skipped rounding x (ratio of the two at most 0.44 over those seeds).
  INFO("measured against both references");
  const auto unrounded = RefForward(m.config, m.random.weights, ids, false);
  double err2_unrounded = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err2_unrounded += (got[i] - unrounded[i]) * (got[i] - unrounded[i]);
  }
  CAPTURE(std::sqrt(err2_unrounded / ref2));
  CHECK(err2 < err2_unrounded);
}

// Relative RMS of got against want.
double RelativeRms(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err2 += (got[i] - want[i]) * (got[i] - want[i]);
    ref2 += want[i] * want[i];
  }
  return std::sqrt(err2 / ref2);
}

TEST_CASE("With int8 projections, prefill and decode logits match f64 with int8 Linear inputs",
          "[unit][engine][llm]") {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const bool qwen2 = GENERATE(true, false);
  const bool amx_allowed = GENERATE(true, false);
  std::optional<ops::cpu::ScopedF32Gemm> no_amx;
  if (!amx_allowed) no_amx.emplace();
  CAPTURE(qwen2, amx_allowed);
  TinyModel bf16 = MakeTiny(qwen2, DType::kBF16, kv::KvFormat::kF32, rng(), 0.05f);
  DecoderWeights int8_weights = bf16.random.weights;
  REQUIRE(llm::QuantizeProjectionsInt8(int8_weights).ok());
  REQUIRE(int8_weights.layers[0].down_proj.dtype() == DType::kI8);
  REQUIRE(int8_weights.lm_head.dtype() == DType::kI8);
  REQUIRE(int8_weights.embed_tokens.dtype() == DType::kBF16);  // the embedding stays 16-bit
  auto dec = runtime::CreateDecoder(bf16.config, int8_weights);
  REQUIRE(dec.ok());
  auto pool = *kv::PagePool::Create((*dec)->KvLayout(kv::KvFormat::kF32, 8), 4096);
  const auto ids = RandomIds(37, 97, rng);  // 37 rows: the many-row kernel (AMX where allowed)
  auto seq = *(*dec)->NewSequence(pool.get());
  auto logits = (*dec)->Prefill(*seq, *(*dec)->Embed(ids), PrefillOptions{.all_logits = true});
  REQUIRE(logits.ok());
  // The reference's f64 activations and the engine's f32 ones round to different int8 codes where
  // a value lies within f32 error of a midpoint between codes; such a flip moves one input by a
  // whole step (1/127 of its row's largest value) and the random model carries it on. Measured
  // over 50 seeds at weights of stddev 0.05: most runs agree to 1e-7 (no flip), the others to at
  // most 2e-2 in relative RMS; a wrong scale, code, tile or head gives O(1). The kernels
  // themselves are held to 1e-6 in engine_ops_test ("*int8*").
  const auto got = ToFloatVector(*logits);
  const double to_int8 = RelativeRms(got, RefForward(bf16.config, int8_weights, ids));
  CAPTURE(to_int8);
  CHECK(to_int8 <= 5e-2);

  // Decode steps (the few-row kernel) continue the prompt as a one-shot prefill of it does.
  const auto more = RandomIds(3, 97, rng);
  std::vector<int32_t> all = ids;
  all.insert(all.end(), more.begin(), more.end());
  const auto want = RefForward(bf16.config, int8_weights, all);
  for (size_t i = 0; i < more.size(); ++i) {
    Sequence* one[] = {seq.get()};
    const int32_t token[] = {more[i]};
    auto step = (*dec)->DecodeStep(one, token);
    REQUIRE(step.ok());
    const size_t row = ids.size() + i;
    const std::vector<double> want_row(want.begin() + row * 97, want.begin() + (row + 1) * 97);
    const double rms = RelativeRms(ToFloatVector(*step), want_row);
    CAPTURE(i, rms);
    CHECK(rms <= 5e-2);
  }
}

TEST_CASE("int8 weights are refused off the CPU and weight formats are named",
          "[unit][engine][llm]") {
  CHECK(runtime::ParseWeightFormat("int8").value() == runtime::WeightFormat::kInt8);
  CHECK(runtime::ParseWeightFormat("bf16").value() == runtime::WeightFormat::kBf16);
  const Status bad = runtime::ParseWeightFormat("q4").status();
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.message()), Catch::Contains("bf16, int8 or fp8"));
  const Status fp8 = runtime::CheckWeightFormat(runtime::WeightFormat::kFp8, Device::Cpu());
  CHECK(fp8.code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(std::string(fp8.message()), Catch::Contains("sm_90"));
  CHECK(runtime::CheckWeightFormat(runtime::WeightFormat::kInt8, Device::Cpu()).ok());
  CHECK(runtime::CheckWeightFormat(runtime::WeightFormat::kInt8, Device::Cuda(0)).code() ==
        absl::StatusCode::kUnimplemented);
  // A decoder given int8 projections without their scales names the tensor.
  TinyModel m = MakeTiny(true, DType::kBF16, kv::KvFormat::kF32, 5);
  DecoderWeights w = m.random.weights;
  REQUIRE(llm::QuantizeProjectionsInt8(w).ok());
  w.layers[1].up_scale = Tensor();
  const auto dec = runtime::CreateDecoder(m.config, w);
  CHECK(dec.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(dec.status().message()), Catch::Contains("layers.1.up_proj"));
}

TEST_CASE("Chunked prefill and decode steps reproduce one-shot prefill", "[unit][engine][llm]") {
  ops::cpu::ScopedF32Gemm f32_gemm;  // the decode steps' GEMV never rounds x to bf16
  std::mt19937_64 rng(testing::TestSeed());
  const kv::KvFormat format = GENERATE(kv::KvFormat::kF32, kv::KvFormat::kF16);
  CAPTURE(kv::KvFormatName(format));
  TinyModel m = MakeTiny(true, DType::kBF16, format, rng());
  const auto ids = RandomIds(30, 97, rng);
  auto full_seq = *m.decoder->NewSequence(m.pool.get());
  auto full =
      *m.decoder->Prefill(*full_seq, *m.decoder->Embed(ids), PrefillOptions{.all_logits = true});
  const auto want = ToFloatVector(full);
  // f16 KV rounds keys/values of earlier tokens; the one-shot path attends to f32 ones.
  const double tol = format == kv::KvFormat::kF32 ? 2e-5 : 1.5e-2;

  // Prefill 20 in chunks of 7, then decode the remaining 10 one at a time.
  auto seq = *m.decoder->NewSequence(m.pool.get());
  auto first = std::vector<int32_t>(ids.begin(), ids.begin() + 20);
  auto chunked = m.decoder->Prefill(*seq, *m.decoder->Embed(first),
                                    PrefillOptions{.chunk_tokens = 7, .all_logits = true});
  REQUIRE(chunked.ok());
  test::RequireClose(*chunked, std::vector<double>(want.begin(), want.begin() + 20 * 97), tol, tol);
  for (int i = 20; i < 30; ++i) {
    Sequence* s = seq.get();
    auto step = m.decoder->DecodeStep(std::span<Sequence* const>(&s, 1),
                                      std::span<const int32_t>(&ids[i], 1));
    REQUIRE(step.ok());
    test::RequireClose(
        *step, std::vector<double>(want.begin() + i * 97, want.begin() + (i + 1) * 97), tol, tol);
  }
  CHECK(seq->length == 30);
  CHECK(seq->kv.num_tokens(2) == 30);
  CHECK(seq->kv.num_pages() == 3 * 4);  // 30 tokens in pages of 8, per layer
}

TEST_CASE("One batched decode step equals separate steps of each sequence", "[unit][engine][llm]") {
  std::mt19937_64 rng(testing::TestSeed());
  TinyModel m = MakeTiny(false, DType::kF32, kv::KvFormat::kF16, rng());
  std::vector<std::unique_ptr<Sequence>> a, b;
  std::vector<int32_t> next;
  for (int len : {5, 17, 9}) {
    const auto ids = RandomIds(len, 97, rng);
    for (auto* group : {&a, &b}) {
      group->push_back(*m.decoder->NewSequence(m.pool.get()));
      REQUIRE(m.decoder->Prefill(*group->back(), *m.decoder->Embed(ids)).ok());
    }
    next.push_back(RandomIds(1, 97, rng)[0]);
  }
  std::vector<Sequence*> batch = {a[0].get(), a[1].get(), a[2].get()};
  auto batched = m.decoder->DecodeStep(batch, next);
  REQUIRE(batched.ok());
  const auto got = ToFloatVector(*batched);
  for (int i = 0; i < 3; ++i) {
    Sequence* s = b[i].get();
    auto one = *m.decoder->DecodeStep(std::span<Sequence* const>(&s, 1),
                                      std::span<const int32_t>(&next[i], 1));
    const auto want = ToFloatVector(one);
    for (int j = 0; j < 97; ++j) REQUIRE(std::fabs(got[i * 97 + j] - want[j]) < 1e-5);
  }
}

TEST_CASE("Fused q/k/v and gate/up projections give the separate projections' logits",
          "[unit][engine][llm]") {
  std::mt19937_64 rng(testing::TestSeed());
  const bool qwen2 = GENERATE(true, false);  // q/k/v biases, or none
  const DType wdtype = GENERATE(DType::kBF16, DType::kF32, DType::kI8);
  CAPTURE(qwen2, DTypeName(wdtype));
  const model::TextConfig config = testing::TinyDecoderConfig(qwen2);
  RandomDecoderWeights random = *runtime::MakeRandomDecoderWeights(
      config, wdtype == DType::kI8 ? DType::kBF16 : wdtype, rng());
  // int8: the projections quantised as --weight-format int8 does, so the fused weights carry
  // their concatenated scales.
  if (wdtype == DType::kI8) REQUIRE(llm::QuantizeProjectionsInt8(random.weights).ok());
  const DecoderShape shape = *runtime::DecoderShapeOf(config);
  auto separate =
      *Decoder::Create(shape, random.weights, Device::Cpu(), ProjectionLayout::kSeparate);
  auto fused = *Decoder::Create(shape, random.weights, Device::Cpu(), ProjectionLayout::kFused);
  CHECK_FALSE(separate->fused_projections());
  REQUIRE(fused->fused_projections());
  // Both groups, in every layer (q/k/v biases are as long as their rows: q's differ from k's).
  for (const LayerWeights& L : fused->weights().layers) {
    REQUIRE(L.qkv_proj.defined());
    REQUIRE(L.gate_up_proj.defined());
    CHECK(L.qkv_bias.defined() == qwen2);
    CHECK(L.qkv_scale.defined() == (wdtype == DType::kI8));
    CHECK(L.gate_up_scale.defined() == (wdtype == DType::kI8));
    CHECK_FALSE(L.q_proj.defined());
  }
  // A prefill of every logit row, then decode steps of two sequences batched.
  std::vector<std::vector<float>> got[2];
  std::vector<std::unique_ptr<kv::PagePool>> pools;
  const auto prompt_a = RandomIds(23, 97, rng), prompt_b = RandomIds(9, 97, rng);
  const auto next = RandomIds(6, 97, rng);
  for (int which = 0; which < 2; ++which) {
    Decoder& d = which == 0 ? *separate : *fused;
    pools.push_back(*kv::PagePool::Create(d.KvLayout(kv::KvFormat::kF16, 8), 4096));
    auto a = *d.NewSequence(pools.back().get());
    auto b = *d.NewSequence(pools.back().get());
    got[which].push_back(
        ToFloatVector(*d.Prefill(*a, *d.Embed(prompt_a), PrefillOptions{.all_logits = true})));
    got[which].push_back(ToFloatVector(*d.Prefill(*b, *d.Embed(prompt_b))));
    std::vector<Sequence*> batch = {a.get(), b.get()};
    for (size_t i = 0; i < next.size(); i += 2) {
      auto step = d.DecodeStep(batch, std::span<const int32_t>(&next[i], 2));
      REQUIRE(step.ok());
      got[which].push_back(ToFloatVector(*step));
    }
  }
  // The GEMMs and the split are each exact alone (tests of their own), but the two layouts need not
  // be bit for bit: without AMX a many-row bf16 or f32 GEMM is OpenBLAS sgemm, whose blocking
  // follows the matrix sizes (seen: up to 8e-6 of the largest logit, about 1, over 30 seeds on a
  // Zen 4), and with the AVX-512 kernels the logits with q/k/v biases differed in the last bit on
  // some seeds even for int8 (never with FRAMEZIP_CPU_KERNELS=avx2), where a last-bit difference
  // can flip the next layer's int8 code of an activation (1.6e-3 of the largest logit, once in 40
  // runs). A wrong scale, row order or bias moves a logit by O(1).
  const double tol = wdtype == DType::kI8 ? 2e-2 : 2e-5;
  REQUIRE(got[0].size() == got[1].size());
  for (size_t i = 0; i < got[0].size(); ++i) {
    REQUIRE(got[0][i].size() == got[1][i].size());
    double worst = 0, largest = 0;
    for (size_t j = 0; j < got[0][i].size(); ++j) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[0][i][j]) - got[1][i][j]));
      largest = std::max(largest, std::fabs(static_cast<double>(got[0][i][j])));
    }
    CAPTURE(i, worst, largest);
    CHECK(worst <= tol * largest);
  }
}

TEST_CASE("Decoder refuses weights of the wrong shape, naming the tensor", "[unit][engine][llm]") {
  auto c = testing::TinyDecoderConfig(true);
  auto r = *runtime::MakeRandomDecoderWeights(c, DType::kF32, 1);
  r.weights.layers[1].k_proj = *Tensor::Empty({16, 64}, DType::kF32);
  auto dec = runtime::CreateDecoder(c, r.weights);
  REQUIRE(!dec.ok());
  CHECK_THAT(MessageOf(dec.status()), Catch::Contains("layers.1.k_proj"));
}

TEST_CASE("Decoder refuses KV pages on another device than its own, naming both",
          "[unit][engine][llm]") {
  auto c = testing::TinyDecoderConfig(true);
  auto r = *runtime::MakeRandomDecoderWeights(c, DType::kF32, 3);
  auto dec = *runtime::CreateDecoder(c, r.weights);
  // Pools reserve their pages lazily, so pools "on a GPU" exist on any machine until a page is
  // taken: a CPU decoder must refuse them before any kernel reads a device pointer.
  const kv::KvFormat f16 = kv::KvFormat::kF16;
  auto gpu_pools = kv::KvPools::Create(dec->KvLayout(f16, 8), {&f16, 1}, 1 << 20, Device::Cuda(0));
  REQUIRE(gpu_pools.ok());
  auto seq = dec->NewSequence(**gpu_pools, f16, "none");
  REQUIRE(seq.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(MessageOf(seq.status()), Catch::Contains("cuda:0") && Catch::Contains("cpu"));
  auto cpu_pools = *kv::KvPools::Create(dec->KvLayout(f16, 8), {&f16, 1}, 1 << 20);
  CHECK(dec->NewSequence(*cpu_pools, f16, "none").ok());
}

TEST_CASE("A full KV pool is RESOURCE_EXHAUSTED, not a crash", "[unit][engine][llm]") {
  auto c = testing::TinyDecoderConfig(true);
  auto r = *runtime::MakeRandomDecoderWeights(c, DType::kF32, 2);
  auto dec = *runtime::CreateDecoder(c, r.weights);
  auto pool = *kv::PagePool::Create(dec->KvLayout(kv::KvFormat::kF16, 8), 5);
  auto seq = *dec->NewSequence(pool.get());
  std::vector<int32_t> ids(20, 3);
  auto out = dec->Prefill(*seq, *dec->Embed(ids));
  CHECK(out.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(MessageOf(out.status()), Catch::Contains("f16") && Catch::Contains("layer"));
  // The step's pages were reserved before any layer wrote: nothing was taken or stored.
  CHECK(pool->pages_in_use() == 0);
  CHECK(seq->length == 0);
  CHECK(seq->kv.num_tokens(0) == 0);
}

TEST_CASE("A step the KV pools cannot serve for one sequence changes no sequence of the step",
          "[unit][engine][llm]") {
  auto c = testing::TinyDecoderConfig(true);
  auto r = *runtime::MakeRandomDecoderWeights(c, DType::kF32, 2);
  auto dec = *runtime::CreateDecoder(c, r.weights);
  // 3 layers, pages of 8 tokens: a decode token needs one page per layer, a 20-token chunk three.
  auto pool = *kv::PagePool::Create(dec->KvLayout(kv::KvFormat::kF16, 8), 10);
  auto decoding = *dec->NewSequence(pool.get());
  auto starting = *dec->NewSequence(pool.get());
  const std::vector<int32_t> prompt(8, 3);
  REQUIRE(dec->Prefill(*decoding, *dec->Embed(prompt)).ok());  // fills one page per layer
  REQUIRE(pool->pages_in_use() == 3);
  // The decode token needs 3 pages and the chunk 9 more: 12 > 10 - 3.
  StepInput inputs[2];
  inputs[0].seq = decoding.get();
  inputs[0].token = 5;
  inputs[1].seq = starting.get();
  inputs[1].embeds = *dec->Embed(std::vector<int32_t>(20, 4));
  const auto step = dec->MixedStep(inputs);
  REQUIRE(step.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(pool->pages_in_use() == 3);
  CHECK(decoding->length == 8);
  CHECK(starting->length == 0);
  for (int l = 0; l < 3; ++l) {
    CHECK(decoding->kv.num_tokens(l) == 8);
    CHECK(starting->kv.num_tokens(l) == 0);
  }
  // Alone, the decode token fits, and the step runs as if the refused one never happened.
  CHECK(dec->MixedStep(std::span(inputs, 1)).ok());
  CHECK(decoding->kv.num_tokens(2) == 9);
  CHECK(pool->pages_in_use() == 6);
}

TEST_CASE("AttentionPack's visual rows go to reserved pages when the KV budget cannot hold a block",
          "[unit][engine][llm]") {
  auto c = testing::TinyDecoderConfig(true);  // 3 layers, G·d = 32
  auto r = *runtime::MakeRandomDecoderWeights(c, DType::kF32, 2);
  auto dec = *runtime::CreateDecoder(c, r.weights);
  const kv::KvFormat f16 = kv::KvFormat::kF16;
  const kv::PageLayout layout = dec->KvLayout(f16, 8);
  // A 48-row chunk, 40 of them visual (a block of 40 >= min_tokens 32): the step reserves 6 pages
  // per layer. Budget: exactly those 18 pages, so no block fits beside them.
  std::mt19937_64 rng(testing::TestSeed());
  const Tensor embeds = testing::RandomEmbeds(48, c.hidden_size, rng);
  std::vector<uint8_t> visual(48, 0);
  std::fill(visual.begin() + 4, visual.begin() + 44, uint8_t{1});
  PrefillOptions options;
  options.visual = visual;
  for (const int64_t budget_pages : {18, 1000}) {
    CAPTURE(budget_pages);
    auto pools = *kv::KvPools::Create(layout, {&f16, 1},
                                      budget_pages * static_cast<int64_t>(layout.PageBytes()));
    auto seq = *dec->NewSequence(*pools, f16, "attentionpack");
    seq->prefill_stats.Reset(3);
    REQUIRE(dec->Prefill(*seq, embeds, options).ok());
    const bool squeezed = budget_pages == 18;
    CHECK(seq->prefill_stats.low_rank_fallbacks == (squeezed ? 3 : 0));
    for (int l = 0; l < 3; ++l) {
      CHECK(seq->kv.num_tokens(l) == 48);  // every layer whole, however its rows are stored
      CHECK(seq->kv.low_rank_blocks(l).size() == (squeezed ? 0u : 1u));
      CHECK(seq->kv.page_tokens(l) == (squeezed ? 48 : 8));
    }
    // The next token: with the budget spent it is refused before anything is written.
    const int32_t token = 5;
    Sequence* const one[] = {seq.get()};
    const auto step = dec->DecodeStep(one, std::span(&token, 1));
    if (squeezed) {
      CHECK(step.status().code() == absl::StatusCode::kResourceExhausted);
      CHECK(seq->kv.num_tokens(2) == 48);
    } else {
      CHECK(step.ok());
      CHECK(seq->kv.num_tokens(2) == 49);
    }
  }
}

TEST_CASE("A decoder's KV backend declares the page formats it reads and refuses other pools",
          "[unit][engine][llm]") {
  auto c = testing::TinyDecoderConfig(true);  // head_dim 16: no quantised pages (32-channel blocks)
  auto r = *runtime::MakeRandomDecoderWeights(c, DType::kF32, 2);
  auto dec = *runtime::CreateDecoder(c, r.weights);
  const KvBackend::Capabilities& caps = dec->kv_backend().capabilities();
  CHECK(caps.device == Device::Cpu());
  CHECK(caps.head_dim == 16);
  CHECK(caps.page_formats == std::vector<kv::KvFormat>{kv::KvFormat::kF32, kv::KvFormat::kF16});
  const Status int4 =
      dec->kv_backend().CheckPool(dec->KvLayout(kv::KvFormat::kInt4, 8), Device::Cpu());
  CHECK(int4.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(MessageOf(int4), Catch::Contains("int4") && Catch::Contains("head_dim 16") &&
                                  Catch::Contains("f32, f16"));
  kv::PageLayout other_heads = dec->KvLayout(kv::KvFormat::kF16, 8);
  other_heads.num_kv_heads = 4;
  CHECK_THAT(MessageOf(dec->kv_backend().CheckPool(other_heads, Device::Cpu())),
             Catch::Contains("4 heads"));
  CHECK(dec->kv_backend().CheckPool(dec->KvLayout(kv::KvFormat::kF16, 8), Device::Cpu()).ok());

  auto wide = c;
  wide.hidden_size = 128;
  wide.head_dim = 32;
  auto wide_weights = *runtime::MakeRandomDecoderWeights(wide, DType::kF32, 2);
  auto wide_dec = *runtime::CreateDecoder(wide, wide_weights.weights);
  CHECK(wide_dec->kv_backend().capabilities().page_formats.size() == 4);
  CHECK(wide_dec->kv_backend()
            .CheckPool(wide_dec->KvLayout(kv::KvFormat::kInt2, 32), Device::Cpu())
            .ok());
}

}  // namespace
}  // namespace framezip::engine::llm

namespace framezip::engine {
namespace {

TEST_CASE("A decoder refuses at construction a head size its device's kernels lack",
          "[unit][engine][llm]") {
  auto c = testing::TinyDecoderConfig(true);
  c.hidden_size = 4 * 96;
  c.head_dim = 96;  // neither 64 nor 128: the GPU's paged decode kernels are not built for it
  auto r = *runtime::MakeRandomDecoderWeights(c, DType::kF32, 4);
  const auto on_gpu = runtime::CreateDecoder(c, r.weights, Device::Cuda(0));
  REQUIRE(on_gpu.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(MessageOf(on_gpu.status()), Catch::Contains("head_dim 96") &&
                                             Catch::Contains("cuda:0") &&
                                             Catch::Contains("64 and 128"));
  CHECK(runtime::CreateDecoder(c, r.weights).ok());  // the CPU takes any head size
}

}  // namespace
}  // namespace framezip::engine
