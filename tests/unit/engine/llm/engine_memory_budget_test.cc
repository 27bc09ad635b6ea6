// A memory budget for weights and KV together (EngineOptions::memory_budget_bytes): what the
// loaded weights count (runtime/weight_bytes.h), what they leave the KV pool, and that 8-bit
// weights leave it more.
#include <catch2/catch.hpp>
#include <string>

#include "engine/core/thread_pool.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/weight_bytes.h"
#include "tests/testing/temp_dir.h"

namespace framezip::engine {
namespace {

Tensor F32(Shape shape) { return *Tensor::Zeros(std::move(shape), DType::kF32); }

TEST_CASE("the weights count once per tensor they hold, a tied head once",
          "[unit][engine][runtime]") {
  llm::DecoderWeights decoder;
  decoder.embed_tokens = F32({10, 4});  // 160 bytes
  decoder.lm_head = decoder.embed_tokens;
  decoder.norm = F32({4});  // 16
  llm::LayerWeights layer;
  layer.q_proj = F32({8, 4});                                  // 128
  layer.q_bias = F32({8});                                     // 32
  layer.down_proj = *Tensor::Zeros({4, 6}, DType::kI8);        // 24
  layer.down_scale = F32({4});                                 // 16
  layer.gate_up_proj = *Tensor::Zeros({12, 4}, DType::kBF16);  // 96
  decoder.layers = {layer, layer};  // the same tensors twice: counted once
  vision::LlavaVisionWeights vision;
  vision.projector.linear1_weight = F32({2, 3});  // 24
  vision.image_newline = F32({4});                // 16
  CHECK(runtime::HeldWeightBytes(decoder, vision) == 160 + 16 + 128 + 32 + 24 + 16 + 96 + 24 + 16);

  llm::LayerWeights own = layer;
  own.q_proj = F32({8, 4});
  decoder.layers = {layer, own};
  decoder.lm_head = F32({10, 4});  // an untied head is a tensor of its own
  CHECK(runtime::HeldWeightBytes(decoder, vision) ==
        2 * 160 + 16 + 2 * 128 + 32 + 24 + 16 + 96 + 24 + 16);
}

TEST_CASE("a memory budget leaves the KV pool what the weights do not take",
          "[unit][engine][runtime]") {
  CHECK(*runtime::KvBudgetLeftByWeights(1000, 600, 100, "bf16") == 400);
  CHECK(*runtime::KvBudgetLeftByWeights(1000, 900, 100, "bf16") == 100);  // exactly one page
  const Status short_of_a_page = runtime::KvBudgetLeftByWeights(1000, 901, 100, "bf16").status();
  CHECK(short_of_a_page.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(short_of_a_page.message()), Catch::Contains("memory budget") &&
                                                         Catch::Contains("bf16 weights") &&
                                                         Catch::Contains("--weight-format"));
  // Weights already in 8 bits: the only way out is a larger budget.
  const Status int8 = runtime::KvBudgetLeftByWeights(1000, 2000, 100, "int8").status();
  CHECK(int8.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(int8.message()), !Catch::Contains("--weight-format"));
  CHECK(runtime::KvBudgetLeftByWeights(0, 0, 100, "bf16").status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(runtime::KvBudgetLeftByWeights(1000, 0, 0, "bf16").status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("in one memory budget, int8 weights leave the shipped model's KV pool more pages",
          "[unit][engine][runtime]") {
  SetComputeThreads(2);
  const auto model = testing::SourceDir() / "models/framezip-tiny-video";
  runtime::EngineOptions bf16;
  bf16.memory_budget_bytes = 3 << 20;
  runtime::EngineOptions int8 = bf16;
  int8.weight_format = runtime::WeightFormat::kInt8;
  auto wide = runtime::Engine::Load(model, bf16);
  auto narrow = runtime::Engine::Load(model, int8);
  REQUIRE(wide.ok());
  REQUIRE(narrow.ok());
  const runtime::Engine& w = **wide;
  const runtime::Engine& n = **narrow;
  CHECK(w.weight_bytes() > 0);
  CHECK(n.weight_bytes() < w.weight_bytes());
  // Each pool gets exactly what its weights leave of the budget, kv_max_bytes set aside.
  CHECK(w.options().kv_max_bytes == (3 << 20) - static_cast<int64_t>(w.weight_bytes()));
  CHECK(n.options().kv_max_bytes == (3 << 20) - static_cast<int64_t>(n.weight_bytes()));
  const auto pages = [](const runtime::Engine& e) {
    return e.kv_pool().pool(e.options().kv_format)->max_pages();
  };
  CHECK(pages(n) > pages(w));

  // A budget the weights fill refuses to load, naming both sizes.
  runtime::EngineOptions tight = bf16;
  tight.memory_budget_bytes = static_cast<int64_t>(w.weight_bytes());
  const auto refused = runtime::Engine::Load(model, tight);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("memory budget"));
}

}  // namespace
}  // namespace framezip::engine
