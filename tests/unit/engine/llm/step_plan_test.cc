// Decode steps planned ahead (engine/llm/step_plan.h) on the CPU, through the same plan code a GPU
// step runs: a planned step gives the eager step's logits and KV bit for bit (none, kivi with its
// residual window recompressing mid-run, zipvl, attentionpack with and without its window
// recompressed into blocks; f32 and f16 pages), policies that decide during a
// step stay eager, and a decode step's uploads, copies and synchronisations stay the same whatever
// the number of layers or sequences, with one KV write and one attention per layer for the batch;
// a step that samples its decode rows sends their parameters with the plan.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/step_counters.h"
#include "engine/core/thread_pool.h"
#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/ops/sample.h"
#include "tests/testing/random.h"
#include "tests/testing/tiny_decoder.h"

namespace framezip::engine::llm {
namespace {

using testing::RandomEmbeds;

struct Twin {
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<kv::KvPools> pools;
  std::vector<std::unique_ptr<Sequence>> seqs;

  std::vector<Sequence*> Pointers() const {
    std::vector<Sequence*> out;
    for (const auto& s : seqs) out.push_back(s.get());
    return out;
  }
};

// A decoder over `weights` with its own pools, plans on or off.
Twin MakeTwin(const model::TextConfig& config, const llm::RandomDecoderWeights& weights,
              kv::KvFormat full, bool plans) {
  Twin t;
  t.decoder = *runtime::CreateDecoder(config, weights.weights);
  t.decoder->set_step_plans(plans);
  t.pools =
      *kv::KvPools::Create(t.decoder->KvLayout(full, 8), kv::StorableFormats(), int64_t{64} << 20);
  return t;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Every layer's tokens of `s` as f32 keys then values.
std::vector<float> KvContents(const Sequence& s, const DecoderShape& shape) {
  std::vector<float> out;
  const int64_t row = shape.kv_heads * shape.head_dim;
  for (int l = 0; l < shape.layers; ++l) {
    const int64_t n = s.kv.num_tokens(l);
    std::vector<float> k(static_cast<size_t>(n * row)), v(k.size());
    REQUIRE(s.kv.Gather(l, k.data(), v.data()).ok());
    out.insert(out.end(), k.begin(), k.end());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST_CASE("A planned decode step gives the eager step's logits and KV bit for bit",
          "[unit][engine][llm]") {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const model::TextConfig config = testing::TinyQwen2Config();
  const auto weights = *runtime::MakeRandomDecoderWeights(config, DType::kBF16, rng(), 0.3f);
  const auto [policy, full] = GENERATE(
      std::pair<const char*, kv::KvFormat>{"none", kv::KvFormat::kF16},
      std::pair<const char*, kv::KvFormat>{"none", kv::KvFormat::kF32},
      std::pair<const char*, kv::KvFormat>{"kivi:window=4", kv::KvFormat::kF16},
      std::pair<const char*, kv::KvFormat>{"zipvl", kv::KvFormat::kF16},
      // Low-rank blocks of the visual rows beside the pages, the window recompressed
      // into more blocks mid-run.
      std::pair<const char*, kv::KvFormat>{"attentionpack", kv::KvFormat::kF16},
      std::pair<const char*, kv::KvFormat>{"attentionpack:recompress=6", kv::KvFormat::kF16});
  CAPTURE(policy, kv::KvFormatName(full));
  Twin planned = MakeTwin(config, weights, full, true);
  Twin eager = MakeTwin(config, weights, full, false);
  // Three sequences with different pasts, so their pages and page boundaries differ; all but
  // the first two rows visual (AttentionPack packs those into blocks).
  for (const int64_t past : {21, 26, 35}) {
    const Tensor embeds = RandomEmbeds(past, config.hidden_size, rng);
    std::vector<uint8_t> visual(static_cast<size_t>(past), 1);
    visual[0] = visual[1] = 0;
    for (Twin* t : {&planned, &eager}) {
      t->seqs.push_back(*t->decoder->NewSequence(*t->pools, full, policy));
      REQUIRE(t->decoder->Prefill(*t->seqs.back(), embeds, {.visual = visual}).ok());
    }
  }
  if (std::string(policy).starts_with("attentionpack")) {
    REQUIRE_FALSE(planned.seqs[2]->kv.low_rank_blocks(0).empty());
  }
  REQUIRE(planned.decoder->kv_backend().CanPlanDecode(planned.Pointers()));
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size) - 1);
  for (int step = 0; step < 10; ++step) {  // past kivi's window twice
    CAPTURE(step);
    std::vector<int32_t> tokens(3);
    for (int32_t& t : tokens) t = token(rng);
    const StepCountScope counts;
    const Tensor a = *planned.decoder->DecodeStep(planned.Pointers(), tokens);
    CHECK(counts.Elapsed().plan_uploads == 1);
    const Tensor b = *eager.decoder->DecodeStep(eager.Pointers(), tokens);
    REQUIRE(Values(a) == Values(b));
    for (size_t i = 0; i < 3; ++i) {
      CHECK(planned.seqs[i]->length == eager.seqs[i]->length);
      CHECK(planned.seqs[i]->kv.bytes_by_format() == eager.seqs[i]->kv.bytes_by_format());
      CHECK(KvContents(*planned.seqs[i], planned.decoder->shape()) ==
            KvContents(*eager.seqs[i], eager.decoder->shape()));
    }
  }
}

TEST_CASE("A step that samples its decode rows samples them as SampleTokens does, in one upload",
          "[unit][engine][llm]") {
  SetComputeThreads(2);
  std::mt19937_64 rng(testing::TestSeed());
  const model::TextConfig config = testing::TinyQwen2Config();
  const auto weights = *runtime::MakeRandomDecoderWeights(config, DType::kBF16, rng(), 0.3f);
  Twin planned = MakeTwin(config, weights, kv::KvFormat::kF16, true);
  Twin eager = MakeTwin(config, weights, kv::KvFormat::kF16, false);
  for (const int64_t past : {5, 8, 13}) {
    const Tensor embeds = RandomEmbeds(past, config.hidden_size, rng);
    for (Twin* t : {&planned, &eager}) {
      t->seqs.push_back(*t->decoder->NewSequence(*t->pools, kv::KvFormat::kF16, "none"));
      REQUIRE(t->decoder->Prefill(*t->seqs.back(), embeds).ok());
    }
  }
  // Greedy, temperature with top-k and top-p, and a repetition penalty with its ids: every field
  // of the packed rows, and penalised ids of more than one row.
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size) - 1);
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    std::vector<ops::RowSampling> rows(3);
    rows[0].greedy = true;
    rows[1].greedy = false;
    rows[1].temperature = 0.7f;
    rows[1].top_k = 20;
    rows[1].top_p = 0.9f;
    rows[1].uniform = uniform(rng);
    rows[2] = {.greedy = false,
               .temperature = 1.3f,
               .repetition_penalty = 1.4f,
               .penalized = {token(rng), token(rng), token(rng)},
               .uniform = uniform(rng)};
    rows[0].repetition_penalty = 1.2f;
    rows[0].penalized = {token(rng)};
    std::vector<int32_t> tokens(3);
    for (int32_t& t : tokens) t = token(rng);

    // The reference: the step's logits, then SampleTokens over them.
    const Tensor reference_logits = *eager.decoder->DecodeStep(eager.Pointers(), tokens);
    Tensor want_logits = *reference_logits.To(Device::Cpu());
    std::vector<int32_t> want(3);
    REQUIRE(ops::SampleTokens(want_logits, rows, want).ok());

    std::vector<StepInput> inputs(3);
    for (size_t i = 0; i < 3; ++i) {
      inputs[i].seq = planned.seqs[i].get();
      inputs[i].token = tokens[i];
    }
    std::vector<int32_t> got(3, -1);
    const StepCountScope counts;
    const StatusOr<Tensor> logits = planned.decoder->MixedStep(inputs, rows, got);
    REQUIRE(logits.ok());
    const StepCounts c = counts.Elapsed();
    CHECK(got == want);
    // The sampled rows are modified in place as SampleTokens modifies them.
    CHECK(Values(*logits) == Values(want_logits));
    // The parameters went up with the plan: still one upload, and on the CPU nothing comes back.
    CHECK(c.plan_uploads == 1);
    CHECK(c.host_to_device == 1);
    CHECK(c.device_to_host == 0);
    CHECK(c.host_syncs == 0);
  }

  // Only decode rows are sampled by the step (one row each), and every sampled row needs an
  // output; a refused step changes no sequence.
  const std::vector<ops::RowSampling> greedy(1);
  std::vector<StepInput> prefill(1);
  prefill[0].seq = planned.seqs[0].get();
  prefill[0].embeds = RandomEmbeds(2, config.hidden_size, rng);
  std::vector<int32_t> one(1);
  const int64_t length = planned.seqs[0]->length;
  const Status refused = planned.decoder->MixedStep(prefill, greedy, one).status();
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.message()), Catch::Contains("1 sampling rows for 0 decode"));
  std::vector<StepInput> decode(1);
  decode[0].seq = planned.seqs[0].get();
  decode[0].token = 1;
  const Status no_output = planned.decoder->MixedStep(decode, greedy, {}).status();
  CHECK(no_output.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(no_output.message()),
             Catch::Contains("1 decode inputs are sampled but 0"));
  CHECK(planned.seqs[0]->length == length);
}

// A policy that stores every decode token but, like Dynamic-LLaVA's decode-token predictor, does
// not promise it before the step: its steps must run eagerly.
class DecidesDuringTheStep final : public compress::CompressionPolicy {
 public:
  std::string_view name() const override { return "decides-during-the-step"; }
  Status OnPrefillLayer(const compress::PrefillLayerInputs&, std::vector<uint8_t>&) override {
    return absl::OkStatus();
  }
  bool OnDecodeWrite(int, int32_t) override {
    ++writes;
    return true;
  }
  int writes = 0;
};

TEST_CASE("Policies that decide during a step run it eagerly", "[unit][engine][llm]") {
  std::mt19937_64 rng(testing::TestSeed());
  const model::TextConfig config = testing::TinyQwen2Config();
  const auto weights = *runtime::MakeRandomDecoderWeights(config, DType::kBF16, rng(), 0.3f);
  Twin t = MakeTwin(config, weights, kv::KvFormat::kF16, true);
  for (int i = 0; i < 2; ++i) {
    t.seqs.push_back(*t.decoder->NewSequence(*t.pools, kv::KvFormat::kF16, "none"));
  }
  CHECK(t.decoder->kv_backend().CanPlanDecode(t.Pointers()));
  auto* deciding = new DecidesDuringTheStep();
  t.seqs[1]->policy.reset(deciding);
  CHECK_FALSE(t.decoder->kv_backend().CanPlanDecode(t.Pointers()));
  const Tensor embeds = RandomEmbeds(6, config.hidden_size, rng);
  for (const auto& s : t.seqs) REQUIRE(t.decoder->Prefill(*s, embeds).ok());
  const StepCountScope counts;
  const std::vector<int32_t> tokens = {1, 2};
  REQUIRE(t.decoder->DecodeStep(t.Pointers(), tokens).ok());
  CHECK(counts.Elapsed().plan_uploads == 0);
  CHECK(deciding->writes == config.num_hidden_layers);  // asked layer by layer, in the step
}

// One decode step of `batch` sequences on a decoder of `layers` layers, planned; its counts.
StepCounts CountsOfOneDecodeStep(int layers, int batch) {
  std::mt19937_64 rng(testing::TestSeed());
  model::TextConfig config = testing::TinyQwen2Config();
  config.num_hidden_layers = layers;
  const auto weights = *runtime::MakeRandomDecoderWeights(config, DType::kBF16, rng(), 0.3f);
  Twin t = MakeTwin(config, weights, kv::KvFormat::kF16, true);
  for (int i = 0; i < batch; ++i) {
    t.seqs.push_back(*t.decoder->NewSequence(*t.pools, kv::KvFormat::kF16, "none"));
    REQUIRE(t.decoder->Prefill(*t.seqs.back(), RandomEmbeds(7 + i, config.hidden_size, rng)).ok());
  }
  const std::vector<int32_t> tokens(static_cast<size_t>(batch), 3);
  const StepCountScope counts;
  REQUIRE(t.decoder->DecodeStep(t.Pointers(), tokens).ok());
  return counts.Elapsed();
}

TEST_CASE("A decode step's copies and synchronisations do not grow with layers or sequences",
          "[unit][engine][llm]") {
  SetComputeThreads(2);
  const StepCounts base = CountsOfOneDecodeStep(2, 1);
  CAPTURE(base.launches, base.host_syncs, base.host_to_device, base.device_to_host);
  // One upload (the plan), no read-back or wait inside the step on the CPU.
  CHECK(base.plan_uploads == 1);
  CHECK(base.host_to_device == 1);
  CHECK(base.device_to_host == 0);
  CHECK(base.host_syncs == 0);
  for (const auto& [layers, batch] : {std::pair{4, 1}, std::pair{2, 5}, std::pair{4, 5}}) {
    CAPTURE(layers, batch);
    const StepCounts c = CountsOfOneDecodeStep(layers, batch);
    CHECK(c.plan_uploads == base.plan_uploads);
    CHECK(c.copies() == base.copies());
    CHECK(c.device_to_device == base.device_to_device);
    CHECK(c.host_syncs == base.host_syncs);
    // The counted work (the embedding, then per layer the batch's KV write and its attention)
    // grows with the layers only: one launch each per layer whatever the batch.
    CHECK(c.launches - base.launches == 2 * (layers - 2));
  }
}

}  // namespace
}  // namespace framezip::engine::llm
