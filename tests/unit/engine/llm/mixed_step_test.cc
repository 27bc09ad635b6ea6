// Decoder::MixedStep (continuous batching's one pass over the weights per step: prefill chunks
// and decode tokens of different sequences together) against the same work done by separate
// PrefillBatch (one chunk each) and DecodeStep calls on twin sequences: same logits, same KV
// contents and formats, same policy statistics, over several steps in which sequences move from
// chunked prefill to decoding, with the none, zipvl and kivi policies.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/ops/gemm_amx.h"
#include "engine/ops/linear.h"
#include "engine/runtime/decoder_loading.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "engine/synthetic/random_model_weights.h"
#include "tests/testing/random.h"
#include "tests/testing/tiny_decoder.h"

namespace framezip::engine::llm {
namespace {

model::TextConfig Config() { return testing::TinyQwen2Config(); }
using testing::RandomEmbeds;

// max |a - b| over max(1, max |b|) on `count` floats.
double RelativeError(const float* a, const float* b, size_t count) {
  double err = 0, scale = 1;
  for (size_t i = 0; i < count; ++i) {
    err = std::max<double>(err, std::fabs(a[i] - b[i]));
    scale = std::max<double>(scale, std::fabs(b[i]));
  }
  return err / scale;
}

bool Quantizing(const std::string& policy) { return policy.rfind("kivi", 0) == 0; }

// One sequence of the test: its policy, the tokens prefilled before the mixed steps, and what it
// does in each step: a prefill chunk of `chunks[s]` rows, or (0) one decode token.
struct Case {
  std::string policy;
  int64_t past = 0;
  std::vector<int64_t> chunks;  // per step; 0 = decode
  bool visual = false;          // mark the middle of each chunk as visual rows
};

const std::string kZipVl = "zipvl:tau=0.8,keep_recent=8,high_bits=16,low_bits=16";

// Runs `cases` through MixedStep and their twins through PrefillBatch + DecodeStep, step by step,
// and compares. `small_steps`: every step has at most ops::kLinearGemvMaxRows rows, so both sides
// take the same row-independent GEMV path and quantized caches must agree value for value;
// larger steps take sgemm, whose rounding depends on the row count.
void CheckAgainstSeparateCalls(std::vector<Case> cases, bool small_steps) {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const auto config = Config();
  auto weights = *runtime::MakeRandomDecoderWeights(config, DType::kBF16, rng(), 0.3f);
  auto dec = *runtime::CreateDecoder(config, weights.weights);
  auto pools = *kv::KvPools::Create(dec->KvLayout(kv::KvFormat::kF32, 8), kv::StorableFormats(),
                                    int64_t{256} << 20);
  const int64_t hid = config.hidden_size, vocab = config.vocab_size;
  size_t steps = 0;
  for (const Case& c : cases) steps = std::max(steps, c.chunks.size());

  std::vector<std::unique_ptr<Sequence>> mixed, separate;
  for (const Case& c : cases) {
    CAPTURE(c.policy);
    const Tensor past = RandomEmbeds(std::max<int64_t>(c.past, 1), hid, rng);
    for (auto* group : {&mixed, &separate}) {
      group->push_back(*dec->NewSequence(*pools, kv::KvFormat::kF32, c.policy));
      if (c.past > 0) REQUIRE(dec->Prefill(*group->back(), past).ok());
      group->back()->prefill_stats.Reset(static_cast<int>(config.num_hidden_layers));
    }
  }

  bool decoded_after_prefill = false;
  for (size_t step = 0; step < steps; ++step) {
    CAPTURE(step);
    std::vector<StepInput> inputs;
    std::vector<size_t> case_of;
    std::vector<std::vector<uint8_t>> visual(cases.size());
    // The reference: the same chunks through one PrefillBatch, the same tokens through one
    // DecodeStep, on the twins.
    std::vector<Sequence*> prefill_seqs, decode_seqs;
    std::vector<Tensor> prefill_embeds;
    std::vector<PrefillOptions> prefill_options;
    std::vector<int32_t> decode_tokens;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      if (step >= c.chunks.size()) continue;
      StepInput in;
      in.seq = mixed[i].get();
      const int64_t rows = c.chunks[step];
      if (rows > 0) {
        in.embeds = RandomEmbeds(rows, hid, rng);
        if (c.visual) {
          visual[i].assign(static_cast<size_t>(rows), 0);
          std::fill(visual[i].begin() + rows / 4, visual[i].begin() + 3 * rows / 4, 1);
          in.visual = visual[i];
        }
        // A prompt's last chunk is followed by decoding (or the end of the test).
        in.logits = step + 1 == c.chunks.size() || c.chunks[step + 1] == 0;
        prefill_seqs.push_back(separate[i].get());
        prefill_embeds.push_back(in.embeds);
        prefill_options.push_back(PrefillOptions{.visual = in.visual});
      } else {
        in.token = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
        decode_seqs.push_back(separate[i].get());
        decode_tokens.push_back(in.token);
        if (step > 0 && c.chunks[step - 1] > 0) decoded_after_prefill = true;
      }
      inputs.push_back(in);
      case_of.push_back(i);
    }
    if (small_steps) {
      int64_t rows = 0;
      for (const StepInput& in : inputs) rows += in.embeds.defined() ? in.embeds.dim(0) : 1;
      REQUIRE(rows <= ops::kLinearGemvMaxRows);
    }
    auto got = dec->MixedStep(inputs);
    REQUIRE(got.ok());
    REQUIRE(got->shape() == Shape{static_cast<int64_t>(inputs.size()), vocab});
    std::vector<Tensor> want_prefill;
    Tensor want_decode;
    if (!prefill_seqs.empty()) {
      auto p = dec->PrefillBatch(prefill_seqs, prefill_embeds, prefill_options);
      REQUIRE(p.ok());
      want_prefill = *std::move(p);
    }
    if (!decode_seqs.empty()) {
      auto d = dec->DecodeStep(decode_seqs, decode_tokens);
      REQUIRE(d.ok());
      want_decode = *std::move(d);
    }
    size_t next_prefill = 0, next_decode = 0;
    for (size_t r = 0; r < inputs.size(); ++r) {
      const Case& c = cases[case_of[r]];
      CAPTURE(c.policy, c.past, r);
      const float* row = got->data<float>() + static_cast<int64_t>(r) * vocab;
      const float* want = nullptr;
      if (inputs[r].embeds.defined()) {
        const Tensor& w = want_prefill[next_prefill++];
        if (!inputs[r].logits) {
          CHECK(std::all_of(row, row + vocab, [](float v) { return v == 0; }));
          continue;
        }
        want = w.data<float>();
      } else {
        want = want_decode.data<float>() + static_cast<int64_t>(next_decode++) * vocab;
      }
      // With sgemm, a kivi cache quantized from rows that differ by f32 rounding may round a value
      // to the neighbouring level; a wrong row or position changes the logits entirely.
      CHECK(RelativeError(row, want, static_cast<size_t>(vocab)) <=
            (Quantizing(c.policy) && !small_steps ? 2e-2 : 1e-4));
    }
  }
  CHECK(decoded_after_prefill);

  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    CAPTURE(c.policy, c.past);
    const Sequence& a = *mixed[i];
    const Sequence& b = *separate[i];
    CHECK(a.length == b.length);
    CHECK(a.prefill_stats.tokens == b.prefill_stats.tokens);
    CHECK(a.prefill_stats.kept == b.prefill_stats.kept);
    CHECK(a.kv.bytes_by_format() == b.kv.bytes_by_format());
    for (int l = 0; l < config.num_hidden_layers; ++l) {
      CAPTURE(l);
      REQUIRE(a.kv.num_tokens(l) == b.kv.num_tokens(l));
      CHECK(a.kv.residual_tokens(l) == b.kv.residual_tokens(l));
      const size_t n = static_cast<size_t>(a.kv.num_tokens(l) * config.kv_dim());
      std::vector<float> ka(n), va(n), kb(n), vb(n);
      REQUIRE(a.kv.Gather(l, ka.data(), va.data()).ok());
      REQUIRE(b.kv.Gather(l, kb.data(), vb.data()).ok());
      if (!Quantizing(c.policy) || small_steps) {
        CHECK(RelativeError(ka.data(), kb.data(), n) <= 1e-4);
        CHECK(RelativeError(va.data(), vb.data(), n) <= 1e-4);
        continue;
      }
      // Quantized after sgemm: a value whose f32 rounding differs may land on the neighbouring
      // level, and deeper layers' inputs carry those flips, so a few values per row differ. Per
      // row, the largest difference over the row's largest value (at least 1) stays small (0
      // failures over 300 seeds at 0.25); a wrong row or position differs by about its own size.
      const size_t dim = static_cast<size_t>(config.kv_dim());
      double worst_k = 0, worst_v = 0;
      for (size_t row = 0; row < n / dim; ++row) {
        const size_t at = row * dim;
        worst_k = std::max(worst_k, RelativeError(ka.data() + at, kb.data() + at, dim));
        worst_v = std::max(worst_v, RelativeError(va.data() + at, vb.data() + at, dim));
      }
      CHECK(worst_k <= 0.25);
      CHECK(worst_v <= 0.25);
    }
  }
  // The compressing policies really ran: zipvl's selection kept fewer than all prefill tokens,
  // kivi's cache holds int2 pages (prefill and the recompressed decode window).
  for (size_t i = 0; i < cases.size(); ++i) {
    const compress::PrefillStats& st = mixed[i]->prefill_stats;
    if (!small_steps && cases[i].policy == kZipVl && st.tokens[0] > 0) CHECK(st.kept != st.tokens);
    if (Quantizing(cases[i].policy)) {
      CHECK(mixed[i]->kv.bytes_by_format()[static_cast<size_t>(kv::KvFormat::kInt2)] > 0);
      // The decode window was recompressed at least once.
      const auto decodes = std::count(cases[i].chunks.begin(), cases[i].chunks.end(), 0);
      REQUIRE(decodes >= 4);
      CHECK(mixed[i]->kv.residual_tokens(0) < decodes);
    }
  }
}

// zipvl keeps every class at full precision (as in prefill_batch_test.cc): its selection, sparse
// attention and statistics are checked without quantization turning f32 rounding into whole
// steps. kivi quantizes: int2 prefill pages, and a decode residual window of 4 tokens requantised
// during the steps.
TEST_CASE("MixedStep equals separate PrefillBatch and DecodeStep calls", "[unit][engine][llm]") {
  ops::cpu::ScopedF32Gemm f32_gemm;  // batch shapes: see gemm_amx.h
  std::vector<Case> cases = {
      {"none", 11, {0, 0, 0, 0}},
      {"kivi:window=4", 20, {0, 0, 0, 0, 0}},
      {kZipVl, 30, {0, 0, 0}},
      {"none", 0, {16, 21, 0, 0}},        // a prompt in two chunks, then decoding
      {kZipVl, 5, {0, 30, 30, 0}, true},  // decoding, then a new turn's prompt in two chunks
      {"none", 3, {0, 1, 0}},             // a one-row chunk (a short follow-up turn)
  };
  if (GENERATE(false, true)) std::reverse(cases.begin(), cases.end());
  CheckAgainstSeparateCalls(cases, /*small_steps=*/false);
}

TEST_CASE("MixedStep equals separate calls value for value on the GEMV path, kivi prefill too",
          "[unit][engine][llm]") {
  std::vector<Case> cases = {
      {"kivi:window=4", 20, {0, 0, 0, 0, 0}},
      {"kivi:window=4", 0, {5, 0, 0, 0, 0}},  // one chunk, then decoding through a recompression
      {"none", 0, {3, 4, 0, 0}},
      {kZipVl, 9, {0, 6, 0}},
  };
  if (GENERATE(false, true)) std::reverse(cases.begin(), cases.end());
  CheckAgainstSeparateCalls(cases, /*small_steps=*/true);
}

StepInput Chunk(Sequence* seq, const Tensor& embeds) {
  StepInput in;
  in.seq = seq;
  in.embeds = embeds;
  return in;
}

StepInput Token(Sequence* seq, int32_t token) {
  StepInput in;
  in.seq = seq;
  in.token = token;
  return in;
}

TEST_CASE("MixedStep rejects bad inputs before changing any sequence", "[unit][engine][llm]") {
  std::mt19937_64 rng(testing::TestSeed());
  const auto config = Config();
  auto weights = *runtime::MakeRandomDecoderWeights(config, DType::kF32, rng(), 0.3f);
  auto dec = *runtime::CreateDecoder(config, weights.weights);
  auto pools = *kv::KvPools::Create(dec->KvLayout(kv::KvFormat::kF32, 8), kv::StorableFormats(),
                                    int64_t{64} << 20);
  auto a = *dec->NewSequence(*pools, kv::KvFormat::kF32, "none");
  auto b = *dec->NewSequence(*pools, kv::KvFormat::kF32, "none");
  const Tensor e = RandomEmbeds(4, config.hidden_size, rng);
  const StepInput twice[] = {Chunk(a.get(), e), Token(a.get(), 1)};
  CHECK(dec->MixedStep(twice).status().code() == absl::StatusCode::kInvalidArgument);
  const Tensor wrong = RandomEmbeds(4, config.hidden_size / 2, rng);
  const StepInput bad_shape[] = {Token(b.get(), 1), Chunk(a.get(), wrong)};
  CHECK(dec->MixedStep(bad_shape).status().code() == absl::StatusCode::kInvalidArgument);
  const StepInput bad_token[] = {Chunk(a.get(), e),
                                 Token(b.get(), static_cast<int32_t>(config.vocab_size))};
  CHECK(dec->MixedStep(bad_token).status().code() == absl::StatusCode::kOutOfRange);
  CHECK(dec->MixedStep({}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(a->length == 0);
  CHECK(b->length == 0);
  CHECK(a->kv.num_tokens(0) == 0);
}

}  // namespace
}  // namespace framezip::engine::llm
