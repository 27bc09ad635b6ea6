// Per-turn compression stats (docs/architecture.md §5) from a real turn of the tiny video model:
// per layer kept ratio, selection time, KV bytes by page format and the ratio to f16 — for zipvl
// (mixed 4/2-bit pages, ratios below 1) against none (f16 only, ratio ~1, every layer keeps
// everything).
#include <catch2/catch.hpp>
#include <numeric>

#include "engine/core/thread_pool.h"
#include "engine/runtime/engine.h"
#include "tests/testing/temp_dir.h"

namespace framezip::engine {
namespace {

runtime::Message VideoMessage(int64_t frames, int64_t size) {
  runtime::VisualInput video;
  video.pixels = *Tensor::Zeros({frames, 3, size, size}, DType::kF32);
  for (int64_t i = 0; i < video.pixels.numel(); ++i) {
    video.pixels.data<float>()[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.f - 1.f;
  }
  return runtime::Message{"user", "What happens in the video?", {video}};
}

TEST_CASE("Turn stats report kept ratios, selection time and KV bytes by format",
          "[unit][engine][runtime]") {
  SetComputeThreads(2);
  auto eng = runtime::Engine::Load(testing::SourceDir() / "models/framezip-tiny-video");
  INFO((eng.ok() ? "" : MessageOf(eng.status())));
  REQUIRE(eng.ok());
  const runtime::Message m = VideoMessage(64, (*eng)->image_size());
  runtime::TurnOptions opt;
  opt.sampling.max_new_tokens = 3;
  const int layers = static_cast<int>((*eng)->config().text.num_hidden_layers);

  auto dense = *(*eng)->NewConversation("none");
  auto d = (*eng)->RunTurn(*dense, std::span(&m, 1), opt);
  REQUIRE(d.ok());
  CHECK(d->stats.layer_kept_ratio == std::vector<float>(layers, 1.f));
  const auto f16 = static_cast<size_t>(kv::KvFormat::kF16);
  CHECK(d->stats.kv_bytes_by_format[f16] == d->stats.kv_bytes);
  CHECK(d->stats.compression_ratio == Approx(1.0).epsilon(0.15));  // page padding only

  auto zip = *(*eng)->NewConversation("zipvl:tau=0.9");
  auto z = (*eng)->RunTurn(*zip, std::span(&m, 1), opt);
  REQUIRE(z.ok());
  const auto& st = z->stats;
  REQUIRE(st.layer_kept_ratio.size() == static_cast<size_t>(layers));
  for (float r : st.layer_kept_ratio) {
    CHECK(r > 0.f);
    CHECK(r < 1.f);
  }
  CHECK(st.selection_overhead_ms > 0);
  const size_t total =
      std::accumulate(st.kv_bytes_by_format.begin(), st.kv_bytes_by_format.end(), size_t{0});
  CHECK(total == st.kv_bytes);
  CHECK(st.kv_bytes_by_format[static_cast<size_t>(kv::KvFormat::kInt4)] > 0);
  CHECK(st.kv_bytes_by_format[static_cast<size_t>(kv::KvFormat::kInt2)] > 0);
  CHECK(st.compression_ratio > 2.0);
  CHECK(st.kv_bytes < d->stats.kv_bytes);
}

}  // namespace
}  // namespace framezip::engine
