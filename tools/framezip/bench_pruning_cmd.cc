// framezip bench pruning: Dynamic-LLaVA's prefill saving at a real model's shape.
//
// The shipped 4-layer model cannot show it: its predictors are as wide as the model (hidden 128),
// so scoring the visual rows costs about what the 4 layers do (bench attention measures that).
// Here the decoder is Qwen2-0.5B (24 layers, hidden 896, random bf16 weights, as bench engine
// uses) and the predictors have the shipped architecture and width (random weights): prefill of
// a chat prompt around a video of F frames of LLaVA-OneVision-0.5B's 196 visual rows each (plus
// the newline), dense vs dynamic_llava, timed in alternated rounds. Random predictor weights
// choose a random 20 % — the cost is the same as for trained ones.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "engine/compress/random_predictors.h"
#include "engine/core/thread_pool.h"
#include "engine/kv/kv_pools.h"
#include "engine/runtime/decoder_loading.h"
#include "engine/synthetic/random_model_weights.h"
#include "tools/bench/bench_report.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/subcommands.h"

namespace framezip::cli {
namespace {

using engine::DType;
using engine::Tensor;
using Clock = std::chrono::steady_clock;
namespace kv = engine::kv;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Prompt {
  Tensor embeds;
  std::vector<uint8_t> visual;
};

// 12 text rows, the video's rows, 12 text rows; embeddings drawn from the model's scale.
StatusOr<Prompt> MakePrompt(const engine::llm::Decoder& dec, int64_t visual_rows, uint64_t seed) {
  const int64_t text = 12, t = 2 * text + visual_rows, hid = dec.shape().hidden;
  Prompt p;
  FZ_ASSIGN_OR_RETURN(p.embeds, Tensor::Empty({t, hid}, DType::kF32));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.02f);
  for (int64_t i = 0; i < p.embeds.numel(); ++i) p.embeds.data<float>()[i] = normal(rng);
  p.visual.assign(static_cast<size_t>(t), 0);
  std::fill_n(p.visual.begin() + text, visual_rows, uint8_t{1});
  return p;
}

struct Run {
  double ms = 0;
  size_t kv_bytes = 0;
  engine::compress::PrefillStats stats;
};

StatusOr<Run> Prefill(const engine::llm::Decoder& dec, const kv::KvPools& pools,
                      std::string_view policy, const Prompt& p) {
  FZ_ASSIGN_OR_RETURN(auto seq, dec.NewSequence(pools, kv::KvFormat::kF16, policy));
  seq->prefill_stats.Reset(static_cast<int>(dec.shape().layers));
  const auto t0 = Clock::now();
  FZ_RETURN_IF_ERROR(dec.Prefill(*seq, p.embeds, {.visual = p.visual}).status());
  Run r;
  r.ms = MsSince(t0);
  r.kv_bytes = seq->kv.bytes();
  r.stats = seq->prefill_stats;
  return r;
}

}  // namespace

int RunBenchPruning(const std::vector<std::string>& args) {
  int threads = 2, frames = 4, rounds = 2;
  double keep = 0.2;
  bool json = false;
  FlagSet flags("framezip bench pruning",
                "Dynamic-LLaVA prefill vs dense on a Qwen2-0.5B-shaped decoder (random bf16 "
                "weights) with predictors of the shipped architecture (random weights): "
                "F frames of 196 visual rows.");
  flags.Int("threads", &threads, "compute threads");
  flags.Int("frames", &frames, "video frames (196 visual rows each, plus a newline row)");
  flags.Int("rounds", &rounds, "alternated rounds (dense, pruned; pruned, dense; ...)");
  flags.Double("keep", &keep, "vision_keep of dynamic_llava");
  flags.Bool("json", &json, "print one JSON object as the last line");
  if (auto code = ParseOrExit(flags, args)) return *code;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "framezip bench pruning: %s\n", MessageOf(s).c_str());
    return 1;
  };
  engine::SetComputeThreads(threads);
  bench::Machine machine = bench::DetectMachine();
  machine.threads = threads;
  bench::Report report("pruning", machine);

  const engine::model::TextConfig config = engine::runtime::Qwen2_0_5BConfig();
  auto random = engine::runtime::MakeRandomDecoderWeights(config, DType::kBF16, 7);
  if (!random.ok()) return fail(random.status());
  auto decoder = engine::runtime::CreateDecoder(config, random->weights);
  if (!decoder.ok()) return fail(decoder.status());
  engine::llm::Decoder& dec = **decoder;
  auto predictors = engine::compress::MakeRandomPredictors({.hidden = config.hidden_size,
                                                            .width = 128,
                                                            .heads = 4,
                                                            .seed = 11});
  if (!predictors.ok()) return fail(predictors.status());
  engine::compress::PolicyResources resources;
  resources.dynamic_llava = *predictors;
  dec.set_policy_resources(resources);
  const kv::KvFormat formats[] = {kv::KvFormat::kF16};
  auto pools = kv::KvPools::Create(dec.KvLayout(kv::KvFormat::kF16), formats, int64_t{4} << 30);
  if (!pools.ok()) return fail(pools.status());

  const int64_t visual_rows = 196 * static_cast<int64_t>(frames) + 1;
  auto prompt = MakePrompt(dec, visual_rows, 3);
  if (!prompt.ok()) return fail(prompt.status());
  const std::string pruned_spec = fmt::format("dynamic_llava:vision_keep={}", keep);
  std::printf("Qwen2-0.5B shape, %lld prompt rows (%d frames, %lld visual), %s\n",
              static_cast<long long>(prompt->embeds.dim(0)), frames,
              static_cast<long long>(visual_rows), pruned_spec.c_str());
  double dense_ms = 0, pruned_ms = 0;
  Run dense, pruned;
  for (int r = 0; r < rounds; ++r) {
    for (int side = 0; side < 2; ++side) {
      const bool run_dense = (side == 0) == (r % 2 == 0);
      auto run = Prefill(dec, **pools, run_dense ? "none" : pruned_spec, *prompt);
      if (!run.ok()) return fail(run.status());
      (run_dense ? dense_ms : pruned_ms) += run->ms;
      (run_dense ? dense : pruned) = *run;
      std::printf("round %d %-6s %.0f ms\n", r, run_dense ? "dense" : "pruned", run->ms);
    }
  }
  dense_ms /= rounds;
  pruned_ms /= rounds;
  const int64_t prompt_rows = prompt->embeds.dim(0);
  report.Add("prompt_tokens", static_cast<double>(prompt_rows), "tokens");
  report.Add("visual_tokens", static_cast<double>(visual_rows), "tokens");
  report.Add("prefill_ms_dense", dense_ms, "ms");
  report.Add("prefill_ms_dynamic_llava", pruned_ms, "ms");
  report.Add("prefill_speedup", dense_ms / pruned_ms, "x", 1.5);
  report.Add("selection_ms", pruned.stats.selection_ms, "ms");
  report.Add("selection_fraction", pruned.stats.selection_ms / pruned.ms, "fraction");
  const auto& tokens = pruned.stats.tokens;
  report.Add("rows_ratio_last_layer",
             static_cast<double>(tokens.back()) / static_cast<double>(prompt_rows), "fraction");
  report.Add("kv_bytes_f16", static_cast<double>(dense.kv_bytes), "bytes");
  report.Add("kv_bytes_dynamic_llava", static_cast<double>(pruned.kv_bytes), "bytes");
  report.Add("kv_ratio_f16_over_dynamic_llava",
             static_cast<double>(dense.kv_bytes) / static_cast<double>(pruned.kv_bytes), "x");
  report.Add("peak_rss", bench::Report::PeakRssMiB(), "MiB");
  if (json) std::printf("%s\n", report.Json().c_str());
  return 0;
}

}  // namespace framezip::cli
