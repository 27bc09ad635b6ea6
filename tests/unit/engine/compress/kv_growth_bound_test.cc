// Engine::KvGrowthBound, what the server admits turns by, holds for real turns of the tiny video
// model under every policy: the KV bytes a conversation holds never grow past it, whatever the
// prefill chunking, across decode recompressions, on a first turn and a follow-up. (An admitted
// turn that outgrew its promise could fail mid-stream for KV memory.) The bound is also not
// wildly loose for `none`, so admission does not waste the budget.
#include <catch2/catch.hpp>

#include "engine/core/thread_pool.h"
#include "engine/runtime/engine.h"
#include "tests/testing/temp_dir.h"

namespace framezip::engine {
namespace {

runtime::Message VideoMessage(int64_t frames, int64_t size, const char* text) {
  runtime::VisualInput video;
  video.pixels = *Tensor::Zeros({frames, 3, size, size}, DType::kF32);
  for (int64_t i = 0; i < video.pixels.numel(); ++i) {
    video.pixels.data<float>()[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.f - 1.f;
  }
  return runtime::Message{"user", text, {video}};
}

// Runs one turn through PrepareTurn + MixedStep in chunks of `chunk` (0 = whole prompt) and
// returns {peak growth over the turn, the bound}.
std::pair<uint64_t, uint64_t> RunTurn(runtime::Engine& eng, runtime::Conversation& c,
                                      const runtime::Message& m, int64_t chunk, int max_new) {
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = max_new;
  opt.ignore_eos = true;
  REQUIRE(eng.PrepareTurn(c, std::span(&m, 1), opt).ok());
  const int64_t prefill = c.prefill_remaining();
  const uint64_t bound = eng.KvGrowthBound(c, prefill, chunk, max_new);
  const uint64_t start = c.kv_bytes();
  uint64_t peak = 0;
  while (c.starting()) {
    std::vector<runtime::StepWork> work = {{&c, chunk > 0 ? chunk : prefill}};
    REQUIRE(eng.MixedStep(work).ok());
    peak = std::max<uint64_t>(peak, c.kv_bytes() > start ? c.kv_bytes() - start : 0);
  }
  while (c.decoding()) {
    std::vector<runtime::StepWork> work = {{&c, 0}};
    REQUIRE(eng.MixedStep(work).ok());
    peak = std::max<uint64_t>(peak, c.kv_bytes() > start ? c.kv_bytes() - start : 0);
  }
  return {peak, bound};
}

TEST_CASE("KV growth stays within Engine::KvGrowthBound for every policy and chunking",
          "[unit][engine][runtime]") {
  SetComputeThreads(2);
  auto eng = runtime::Engine::Load(testing::SourceDir() / "models/framezip-tiny-video");
  REQUIRE(eng.ok());
  const int64_t size = (*eng)->image_size();
  const runtime::Message first = VideoMessage(16, size, "What happens in the video?");
  const runtime::Message follow = {"user", "And after that, what moves next?", {}};
  for (const char* policy : {"none", "zipvl:tau=0.9", "zipvl:tau=0.9,low_bits=evict", "kivi",
                             "kivi4", "fastv"}) {
    for (int64_t chunk : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{64}}) {
      DYNAMIC_SECTION(policy << ", chunks of " << chunk) {
        auto c = (*eng)->NewConversation(policy);
        REQUIRE(c.ok());
        // Long enough decodes that KIVI's and ZipVL's residual windows recompress.
        const auto [peak1, bound1] = RunTurn(**eng, **c, first, chunk, 300);
        CHECK(peak1 > 0);
        CHECK(peak1 <= bound1);
        const auto [peak2, bound2] = RunTurn(**eng, **c, follow, chunk, 150);
        CHECK(peak2 <= bound2);
        if (std::string(policy) == "none") {
          // Dense pages: at most one page per layer of slack.
          CHECK(bound1 < peak1 + peak1 / 4 + 64 * 1024);
        }
      }
    }
  }
}

}  // namespace
}  // namespace framezip::engine
