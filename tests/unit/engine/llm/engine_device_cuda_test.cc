// [cuda]: the whole engine on a GPU (EngineOptions::device: the decoder, its KV pages, the vision
// tower and the projector there) against the engine on the CPU, on the shipped model (bf16
// weights): a three-turn conversation whose later turns reuse the KV of the earlier ones gives the
// same logits, teacher-forced on the CPU's greedy replies (ScoreTurn leaves a conversation as
// generation would), and a conversation exported from one device and restored on the other
// continues alike. Logits are compared, not sampled tokens, so a near tie cannot flip the test:
// the bf16 bounds of decoder_device_test.cc (every GPU GEMM rounds its input to bf16), 1e-1 of the
// logits' RMS per element and 3e-2 in relative L2. The same holds under AttentionPack, whose blocks
// each device factorises from its own K/V rows.
//
// Why these stay GPU-only and are not device cases: moving a conversation across devices needs two
// devices, the CPU and a GPU. The scoring half compares the GPU with the CPU engine because no
// independent reference of it exists: the transformers goldens (decoder_golden_test.cc) cover one
// uncompressed turn of a fixed prompt, not several turns reusing their KV over random video, nor
// ZipVL, KIVI, FastV or AttentionPack, which transformers does not implement. The CPU engine it
// compares with is checked against those goldens, and the decoder's scenarios run on every device
// against an f64 pass in decoder_device_test.cc.
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <string_view>

#include "engine/runtime/engine.h"
#include "tests/testing/random.h"
#include "tests/testing/temp_dir.h"
#include "tests/unit/engine/cuda_test_util.h"

namespace framezip::engine::runtime {
namespace {

std::vector<kv::DecodedSegment> Decode(const ConversationSegment& segment) {
  auto d = kv::DecodeSegment(segment.encoded.blocks);
  FZ_REQUIRE_OK(d);
  std::vector<kv::DecodedSegment> out;
  out.push_back(*std::move(d));
  return out;
}

// The scenario of the file's comment under one compression policy.
void ScoresLikeTheCpuAndMovesAcross(const std::string& policy) {
  CAPTURE(policy);
  const auto dir = testing::SourceDir() / "models/framezip-tiny-video";
  auto cpu = Engine::Load(dir);
  EngineOptions on_gpu;
  on_gpu.device = Device::Cuda(0);
  auto gpu = Engine::Load(dir, on_gpu);
  FZ_REQUIRE_OK(cpu);
  FZ_REQUIRE_OK(gpu);
  const test::RmsTolerance tol{1e-1, 3e-2};

  std::mt19937_64 rng(testing::TestSeed());
  const int64_t s = (*cpu)->image_size();
  VisualInput video;
  video.pixels = *Tensor::Empty({8, 3, s, s}, DType::kF32);
  const std::vector<float> noise = testing::RandomNormal(static_cast<size_t>(8 * 3 * s * s), rng);
  std::copy(noise.begin(), noise.end(), video.pixels.data<float>());
  std::vector<Message> turns(3);
  turns[0].text = "What color is the circle?";
  turns[0].visuals = {video};
  turns[1].text = "What shape is the red object?";
  turns[2].text = "How many times does it appear?";
  TurnOptions opt;
  opt.sampling.max_new_tokens = 8;

  // The CPU's greedy replies, then both devices teacher-forced on them.
  auto greedy = *(*cpu)->NewConversation(policy);
  auto forced_cpu = *(*cpu)->NewConversation(policy);
  auto forced_gpu = *(*gpu)->NewConversation(policy);
  std::vector<std::vector<int32_t>> replies;
  for (int t = 0; t < 3; ++t) {
    auto r = (*cpu)->RunTurn(*greedy, std::span(&turns[t], 1), opt);
    FZ_REQUIRE_OK(r);
    replies.push_back(r->token_ids);
  }
  for (int t = 0; t < 2; ++t) {
    CAPTURE(t);
    auto want = (*cpu)->ScoreTurn(*forced_cpu, std::span(&turns[t], 1), replies[t]);
    auto got = (*gpu)->ScoreTurn(*forced_gpu, std::span(&turns[t], 1), replies[t]);
    FZ_REQUIRE_OK(want);
    FZ_REQUIRE_OK(got);
    test::CheckWithinRms(*got, *want, tol);
    CHECK(forced_gpu->current().stats.visual_tokens == forced_cpu->current().stats.visual_tokens);
    CHECK(forced_gpu->current().stats.cached_tokens == forced_cpu->current().stats.cached_tokens);
  }
  CHECK(forced_gpu->current().stats.cached_tokens > 0);  // turn 2 reused turn 1's KV on the GPU
  CHECK(forced_gpu->current().stats.low_rank_tokens == forced_cpu->current().stats.low_rank_tokens);
  if (std::string_view(policy).find("attentionpack") != std::string_view::npos) {
    // The low-rank path ran on the GPU, not a dense fallback.
    CHECK(forced_gpu->current().stats.low_rank_tokens > 0);
    CHECK(forced_gpu->current().stats.low_rank_attend_ms > 0);
  }
  CHECK(forced_gpu->kv_bytes() == forced_cpu->kv_bytes());

  // Export from each device, restore on the other: turn 3 scores as on the CPU's own conversation.
  auto from_gpu = (*gpu)->ExportConversation(*forced_gpu, {}, 64 << 10);
  auto from_cpu = (*cpu)->ExportConversation(*forced_cpu, {}, 64 << 10);
  FZ_REQUIRE_OK(from_gpu);
  FZ_REQUIRE_OK(from_cpu);
  auto gpu_on_cpu = (*cpu)->RestoreConversation(Decode(*from_gpu));
  auto cpu_on_gpu = (*gpu)->RestoreConversation(Decode(*from_cpu));
  FZ_REQUIRE_OK(gpu_on_cpu);
  FZ_REQUIRE_OK(cpu_on_gpu);
  auto want = (*cpu)->ScoreTurn(*forced_cpu, std::span(&turns[2], 1), replies[2]);
  auto a = (*cpu)->ScoreTurn(*gpu_on_cpu->conversation, std::span(&turns[2], 1), replies[2]);
  auto b = (*gpu)->ScoreTurn(*cpu_on_gpu->conversation, std::span(&turns[2], 1), replies[2]);
  FZ_REQUIRE_OK(want);
  FZ_REQUIRE_OK(a);
  FZ_REQUIRE_OK(b);
  test::CheckWithinRms(*a, *want, tol);
  test::CheckWithinRms(*b, *want, tol);
  CHECK(cpu_on_gpu->conversation->current().stats.cached_tokens ==
        forced_cpu->current().stats.cached_tokens);
}

TEST_CASE("The engine on the GPU scores like the CPU engine and moves conversations across",
          "[cuda][engine][runtime]") {
  if (test::SkipWithoutGpu()) return;
  ScoresLikeTheCpuAndMovesAcross("none");
}

// ZipVL on a GPU plans from probe scores computed there (compress/probe_scoring.h) and classifies
// its residual window (window=4: recompressed within the conversation) from the GPU's pages; KIVI
// requantises its window into int4/int2 pages on the GPU; FastV scores from the GPU's last query
// row and keys.
TEST_CASE("ZipVL, KIVI and FastV on the GPU score like the CPU and move conversations across",
          "[cuda][engine][runtime]") {
  if (test::SkipWithoutGpu()) return;
  for (const char* policy : {"zipvl", "zipvl:window=4", "kivi", "fastv"}) {
    ScoresLikeTheCpuAndMovesAcross(policy);
  }
}

// AttentionPack on a GPU: blocks built on the host from the GPU's K/V rows, attended by the fused
// kernel over the decoder's device copies, rebuilt for later turns' prefill, recompressed from the
// GPU's pages (recompress=16), and carried by the page codec between the devices.
TEST_CASE("AttentionPack on the GPU scores like the CPU and moves conversations across",
          "[cuda][engine][runtime]") {
  if (test::SkipWithoutGpu()) return;
  for (const char* policy :
       {"attentionpack:recompress=16", "attentionpack:factors=int4", "zipvl+attentionpack"}) {
    ScoresLikeTheCpuAndMovesAcross(policy);
  }
}

// A memory budget on a GPU: the device copies of the weights are counted, the pool gets the
// rest, and a budget past what the device has free is refused at load, not at a later turn.
TEST_CASE("A memory budget on the GPU sizes the KV pool beside the device's weights",
          "[cuda][engine][runtime]") {
  if (test::SkipWithoutGpu()) return;
  const auto dir = testing::SourceDir() / "models/framezip-tiny-video";
  EngineOptions options;
  options.device = Device::Cuda(0);
  options.memory_budget_bytes = 64 << 20;
  auto gpu = Engine::Load(dir, options);
  FZ_REQUIRE_OK(gpu);
  CHECK((*gpu)->weight_bytes() > 0);
  CHECK((*gpu)->options().kv_max_bytes ==
        (64 << 20) - static_cast<int64_t>((*gpu)->weight_bytes()));
  auto conversation = (*gpu)->NewConversation();
  FZ_REQUIRE_OK(conversation);
  const Message question{"user", "What color is the circle?", {}};
  TurnOptions turn;
  turn.sampling.max_new_tokens = 4;
  FZ_REQUIRE_OK((*gpu)->RunTurn(**conversation, std::span(&question, 1), turn));

  options.memory_budget_bytes = int64_t{1} << 50;  // a petabyte: more than any device has free
  auto refused = Engine::Load(dir, options);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("free"));
}

}  // namespace
}  // namespace framezip::engine::runtime
