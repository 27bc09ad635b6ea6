// framezip bench attention: a compressing policy (ZipVL by default; Dynamic-LLaVA, FastV, KIVI)
// against dense attention on the tiny video model, in one run (docs/methods.md §1.4-1.5, §3 for
// dynamic_llava; the targets: docs/architecture.md §8):
//   - prefill ms at ~2k / 8k / 16k tokens of real video context, policy none vs zipvl (one-shot
//     prefill, the paper's setting; the median of --prefill-rounds interleaved rounds, A B, B A,
//     ..., so neither side always runs first on a cold cache), the speedup, the measured kept
//     ratio per layer and the selection overhead (probe attention + top-p);
//   - decode tokens/s at the --decode-context length over the f16 cache (none) and the mixed
//     4/2-bit cache (zipvl), plus kivi (uniform 2-bit), timed in
//     interleaved rounds so that load changes on a shared machine hit every cache alike;
//   - KV bytes of each cache and the ratio to f16, and the bytes the embedded KV store holds for
//     the decode-context length once each cache is committed through the page codec.
// The context is a chat-formatted prompt whose video rows come from the vision tower run on
// frames of a synthvid clip. The clip has few frames, so long videos reuse them, each pass shifted
// by a few pixels and slightly re-lit so no two frames are identical (see LongVideo).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>

#include "engine/core/thread_pool.h"
#include "engine/kv/kv_pools.h"
#include "engine/kv/page_codec.h"
#include "engine/llm/decoder.h"
#include "engine/runtime/engine.h"
#include "engine/vision/llava_vision.h"
#include "kvstore/block_key.h"
#include "kvstore/tiered_store.h"
#include "media/media.h"
#include "server/preprocess_spec.h"
#include "tools/bench/bench_report.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/subcommands.h"
#include "tools/framezip/video_frames.h"

namespace framezip::cli {
namespace {

using engine::DType;
using engine::Tensor;
using Clock = std::chrono::steady_clock;
namespace kv = engine::kv;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

using LoadedModel = engine::runtime::Engine;

// Every frame of the clip, preprocessed for the vision tower: [N, 3, S, S].
StatusOr<Tensor> ClipFrames(const LoadedModel& m, const std::filesystem::path& clip) {
  return DecodeVideoFrames(
      clip, 32, server::PreprocessSpecFor(m.preprocessor(), m.config().vision.image_size));
}

// `count` frames from the clip's: pass p over the clip rolls each frame p pixels to the right and
// p/2 down and scales it by 1 + 0.01·(p mod 5), so long videos are not one clip copied verbatim.
StatusOr<Tensor> LongVideo(const Tensor& clip, int64_t count) {
  const int64_t n = clip.dim(0), c = clip.dim(1), h = clip.dim(2), w = clip.dim(3);
  FZ_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({count, c, h, w}, DType::kF32));
  for (int64_t f = 0; f < count; ++f) {
    const int64_t pass = f / n, dx = pass % w, dy = (pass / 2) % h;
    const float gain = 1.f + 0.01f * static_cast<float>(pass % 5);
    const float* src = clip.data<float>() + (f % n) * c * h * w;
    float* dst = out.data<float>() + f * c * h * w;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          dst[(ch * h + y) * w + x] = gain * src[(ch * h + (y + dy) % h) * w + (x + dx) % w];
        }
  }
  return out;
}

// A chat prompt around one video: ids, embeddings with the video rows filled, and the visual mask.
struct Context {
  std::vector<int32_t> ids;
  Tensor embeds;
  std::vector<uint8_t> visual;
};

StatusOr<Context> BuildContext(const LoadedModel& m, const Tensor& clip, int64_t frames) {
  const auto& tok = m.tokenizer();
  FZ_ASSIGN_OR_RETURN(std::vector<int32_t> head, tok.Encode("<|im_start|>user\n", false));
  FZ_ASSIGN_OR_RETURN(
      std::vector<int32_t> tail,
      tok.Encode("\nWhat happens in the video?<|im_end|>\n<|im_start|>assistant\n", false));
  FZ_ASSIGN_OR_RETURN(const int64_t video_rows,
                      engine::vision::VideoTokenCount(m.config(), frames));
  Context ctx;
  ctx.ids = head;
  ctx.ids.insert(ctx.ids.end(), static_cast<size_t>(video_rows),
                 static_cast<int32_t>(m.config().video_token_id));
  ctx.ids.insert(ctx.ids.end(), tail.begin(), tail.end());
  FZ_ASSIGN_OR_RETURN(ctx.embeds, m.decoder().Embed(ctx.ids));
  FZ_ASSIGN_OR_RETURN(Tensor pixels, LongVideo(clip, frames));
  FZ_ASSIGN_OR_RETURN(Tensor rows,
                      engine::vision::EncodeVideo(m.config(), m.vision_weights(), pixels));
  const int64_t hid = m.config().text.hidden_size;
  std::copy(rows.data<float>(), rows.data<float>() + rows.numel(),
            ctx.embeds.data<float>() + static_cast<int64_t>(head.size()) * hid);
  ctx.visual.assign(ctx.ids.size(), 0);
  std::fill_n(ctx.visual.begin() + static_cast<int64_t>(head.size()), video_rows, 1);
  return ctx;
}

// Frames whose context is closest to `tokens` (the model has 4·F + 1 video rows per video).
StatusOr<int64_t> FramesFor(const LoadedModel& m, int64_t tokens) {
  FZ_ASSIGN_OR_RETURN(const int64_t one, engine::vision::VideoTokenCount(m.config(), 1));
  FZ_ASSIGN_OR_RETURN(const int64_t two, engine::vision::VideoTokenCount(m.config(), 2));
  const int64_t per_frame = two - one, text = 24;
  return std::max<int64_t>(1, (tokens - text - (one - per_frame)) / per_frame);
}

struct PrefillRun {
  std::unique_ptr<engine::llm::Sequence> seq;
  double ms = 0;
  double selection_ms = 0;  // of ms, the policy's planning (prefill_stats.selection_ms)
  int32_t next_token = 0;
};

StatusOr<PrefillRun> RunPrefill(const LoadedModel& m, const kv::KvPools& pools,
                                std::string_view policy, const Context& ctx) {
  PrefillRun r;
  FZ_ASSIGN_OR_RETURN(r.seq, m.decoder().NewSequence(pools, kv::KvFormat::kF16, policy));
  r.seq->prefill_stats.Reset(static_cast<int>(m.config().text.num_hidden_layers));
  const auto t0 = Clock::now();
  FZ_ASSIGN_OR_RETURN(Tensor logits,
                      m.decoder().Prefill(*r.seq, ctx.embeds, {.visual = ctx.visual}));
  r.ms = MsSince(t0);
  r.selection_ms = r.seq->prefill_stats.selection_ms;
  const float* l = logits.data<float>();
  r.next_token = static_cast<int32_t>(std::max_element(l, l + logits.dim(1)) - l);
  return r;
}

// Dense and `policy` prefills of `ctx` in `rounds` interleaved rounds (A B, B A, ...): the last
// run of each (its sequence and stats) with its ms and selection ms replaced by their medians
// over the rounds.
StatusOr<std::pair<PrefillRun, PrefillRun>> InterleavedPrefills(const LoadedModel& m,
                                                                const kv::KvPools& pools,
                                                                std::string_view policy,
                                                                const Context& ctx, int rounds) {
  std::pair<PrefillRun, PrefillRun> last;
  std::vector<double> dense_ms, policy_ms, policy_selection_ms;
  for (int r = 0; r < std::max(1, rounds); ++r) {
    for (const bool dense : {r % 2 == 0, r % 2 != 0}) {
      // Free the previous run of this side first: its pages go back before the next prefill.
      (dense ? last.first : last.second).seq.reset();
      FZ_ASSIGN_OR_RETURN(PrefillRun run, RunPrefill(m, pools, dense ? "none" : policy, ctx));
      (dense ? dense_ms : policy_ms).push_back(run.ms);
      if (!dense) policy_selection_ms.push_back(run.selection_ms);
      (dense ? last.first : last.second) = std::move(run);
    }
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  last.first.ms = median(dense_ms);
  last.second.ms = median(policy_ms);
  last.second.selection_ms = median(policy_selection_ms);
  return last;
}

// Greedy decode of `steps` more tokens of `run` (continuing where it stopped); returns seconds.
StatusOr<double> DecodeSeconds(const LoadedModel& m, PrefillRun& run, int steps) {
  engine::llm::Sequence* seqs[] = {run.seq.get()};
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) {
    FZ_ASSIGN_OR_RETURN(Tensor logits, m.decoder().DecodeStep(seqs, std::span(&run.next_token, 1)));
    const float* l = logits.data<float>();
    run.next_token = static_cast<int32_t>(std::max_element(l, l + logits.dim(1)) - l);
  }
  return MsSince(t0) / 1000.0;
}

// Decode tokens/s of each run, `steps` tokens each, timed in interleaved rounds (A B, B A, ...)
// so that a change in the machine's load during the measurement (a shared box) falls on every
// cache alike instead of on whichever ran last.
StatusOr<std::vector<double>> InterleavedDecodeRates(const LoadedModel& m,
                                                     std::span<PrefillRun* const> runs, int steps) {
  constexpr int kRounds = 8;
  std::vector<double> seconds(runs.size(), 0.0);
  int done = 0;
  for (int r = 0; r < kRounds; ++r) {
    const int n = steps * (r + 1) / kRounds - done;
    done += n;
    for (size_t i = 0; i < runs.size(); ++i) {
      const size_t at = r % 2 == 0 ? i : runs.size() - 1 - i;
      FZ_ASSIGN_OR_RETURN(const double sec, DecodeSeconds(m, *runs[at], n));
      seconds[at] += sec;
    }
  }
  std::vector<double> rates;
  for (double sec : seconds) rates.push_back(steps / sec);
  return rates;
}

// f16 bytes of the tokens a sequence holds in low-rank blocks over the blocks' bytes (factors,
// positions, ranks and importance); nullopt without blocks.
std::optional<double> LowRankBlockRatio(const engine::kv::SequenceKv& kv) {
  double f16_bytes = 0;
  for (int l = 0; l < kv.num_layers(); ++l) {
    for (const engine::kv::LowRankBlock& b : kv.low_rank_blocks(l)) {
      f16_bytes += 2.0 * static_cast<double>(b.tokens() * b.keys.cols) * sizeof(uint16_t);
    }
  }
  if (f16_bytes == 0) return std::nullopt;
  return f16_bytes / static_cast<double>(kv.low_rank_bytes());
}

// Bytes the embedded KV store (host tier) holds after a session's commit of `seq`: its pages
// encoded by the engine's page codec (1 MiB blocks, headers and checksums included) and Put one
// key per block, as the server commits a turn (f16 vs compressed for one context).
StatusOr<uint64_t> StoredBytes(const engine::llm::Sequence& seq, std::string_view policy,
                               std::span<const int32_t> ids) {
  kv::SegmentState state;
  state.sequence_length = seq.length;
  state.tokens.assign(ids.begin(), ids.end());
  state.policy = std::string(policy);
  FZ_ASSIGN_OR_RETURN(kv::EncodedSegment segment,
                      kv::EncodeSegment(seq.kv, kv::SegmentMark{}, state, size_t{1} << 20));
  FZ_ASSIGN_OR_RETURN(auto store, kvstore::TieredStore::Open(kvstore::TieredStoreOptions{}));
  kvstore::BlockKey parent = kvstore::kRootBlockKey;
  for (size_t i = 0; i < segment.blocks.size(); ++i) {
    const std::vector<int32_t> index{static_cast<int32_t>(i)};
    parent = kvstore::ChainBlockKey(parent, {.model_id = "bench",
                                             .compression_config = policy,
                                             .token_ids = index,
                                             .media_hashes = {}});
    FZ_RETURN_IF_ERROR(store->Put(parent, std::move(segment.blocks[i])).status());
  }
  FZ_ASSIGN_OR_RETURN(const kvstore::StoreStats stats, store->Stats());
  return stats.tiers.front().bytes;
}

// Sessions of one context that fit in a KV budget of `budget_bytes` (each prefilled until the
// budget refuses one), and their aggregate decode rate as one batch over `steps` steps (the
// prompts' last pages have room for them, so the full budget is not an obstacle).
struct BudgetFit {
  int64_t sessions = 0;
  double decode_tokens_per_s = 0;
};

StatusOr<BudgetFit> FillBudget(const LoadedModel& m, std::string_view policy, const Context& ctx,
                               int64_t budget_bytes, int steps) {
  const kv::KvFormat formats[] = {kv::KvFormat::kF16, kv::KvFormat::kInt4, kv::KvFormat::kInt2};
  FZ_ASSIGN_OR_RETURN(auto pools, kv::KvPools::Create(m.decoder().KvLayout(kv::KvFormat::kF16),
                                                      formats, budget_bytes));
  std::vector<std::unique_ptr<engine::llm::Sequence>> seqs;
  for (int i = 0; i < 100000; ++i) {
    FZ_ASSIGN_OR_RETURN(auto seq, m.decoder().NewSequence(*pools, kv::KvFormat::kF16, policy));
    const Status st = m.decoder().Prefill(*seq, ctx.embeds, {.visual = ctx.visual}).status();
    if (absl::IsResourceExhausted(st)) break;  // `seq` gives its pages back
    FZ_RETURN_IF_ERROR(st);
    seqs.push_back(std::move(seq));
  }
  BudgetFit fit;
  fit.sessions = static_cast<int64_t>(seqs.size());
  if (seqs.empty()) return fit;
  std::vector<engine::llm::Sequence*> batch;
  for (auto& s : seqs) batch.push_back(s.get());
  std::vector<int32_t> tokens(batch.size(), 7);
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    FZ_RETURN_IF_ERROR(m.decoder().DecodeStep(batch, tokens).status());
  }
  fit.decode_tokens_per_s =
      static_cast<double>(steps) * static_cast<double>(batch.size()) / (MsSince(t0) / 1000.0);
  return fit;
}

// The policy's name in metric names: "zipvl" of "zipvl:tau=0.9".
std::string PolicyTag(std::string_view spec) { return std::string(spec.substr(0, spec.find(':'))); }

// Prefill targets (docs/architecture.md §8): ZipVL's 2.6x at 16k tokens, Dynamic-LLaVA's 1.5x on
// the 4-layer model whose layers 0-1 stay dense.
std::optional<double> PrefillSpeedupTarget(std::string_view tag, int64_t target_tokens) {
  if (tag == "zipvl" && target_tokens >= 16384) return 2.6;
  if (tag == "dynamic_llava") return 1.5;
  return std::nullopt;
}

std::string Ratios(const std::vector<float>& r) {
  std::string s;
  for (float x : r) s += fmt::format("{}{:.3f}", s.empty() ? "" : " ", x);
  return s;
}

}  // namespace

int RunBenchAttention(const std::vector<std::string>& args) {
  std::string model_dir = "models/framezip-tiny-video",
              clip = "tests/data/synthvid/demo-test-000011.mp4";
  std::string policy = "zipvl", lengths_flag = "2048,8192,16384";
  int threads = 2, decode_steps = 128, decode_context = 8192, budget_mib = 32, prefill_rounds = 3;
  bool json = false;
  FlagSet flags("framezip bench attention",
                "Prefill dense vs a compressing policy (zipvl, dynamic_llava, ...) at ~2k/8k/16k "
                "tokens of video context on the tiny video model (speedup, kept ratio and rows "
                "run per layer, selection overhead), decode tokens/s over f16 vs the policy's KV, "
                "KV bytes, and KV tokens stored per generated token per layer.");
  flags.String("model", &model_dir, "model directory", "DIR");
  flags.String("clip", &clip, "video clip whose frames make the contexts", "FILE");
  flags.String("policy", &policy, "the compressing policy spec compared with none", "P");
  flags.String("lengths", &lengths_flag, "context lengths in tokens, comma-separated", "N,N");
  flags.Int("threads", &threads, "compute threads");
  flags.Int("decode-steps", &decode_steps, "decode steps timed per cache");
  flags.Int(
      "prefill-rounds", &prefill_rounds,
      "interleaved prefill rounds per length (dense and policy each; the median is reported)");
  flags.Int("decode-context", &decode_context,
            "context length of the decode runs (one of --lengths)");
  flags.Int("budget-mib", &budget_mib,
            "KV budget for the sessions-in-budget figure (64-frame sessions; 0 = skip)");
  flags.Bool("json", &json, "print one JSON object as the last line");
  if (auto code = ParseOrExit(flags, args)) return *code;
  const std::string ptag = PolicyTag(policy);
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "framezip bench attention: %s\n", MessageOf(s).c_str());
    return 1;
  };
  std::vector<int64_t> lengths;
  for (size_t at = 0; at < lengths_flag.size();) {
    const size_t comma = std::min(lengths_flag.find(',', at), lengths_flag.size());
    lengths.push_back(std::atoll(lengths_flag.substr(at, comma - at).c_str()));
    at = comma + 1;
  }
  engine::SetComputeThreads(threads);
  bench::Machine machine = bench::DetectMachine();
  machine.threads = threads;
  bench::Report report("attention", machine);

  auto model = engine::runtime::Engine::Load(model_dir);
  if (!model.ok()) return fail(Annotate(model.status(), "loading the model"));
  const LoadedModel& m = **model;
  const auto& tc = m.config().text;
  std::printf("model %s: %lld layers, %lld/%lld heads x %lld, max_position_embeddings %lld\n",
              model_dir.c_str(), static_cast<long long>(tc.num_hidden_layers),
              static_cast<long long>(tc.num_attention_heads),
              static_cast<long long>(tc.num_key_value_heads), static_cast<long long>(tc.head_dim),
              static_cast<long long>(tc.max_position_embeddings));
  auto frames = ClipFrames(m, clip);
  if (!frames.ok()) return fail(Annotate(frames.status(), "decoding the clip"));
  const kv::KvFormat formats[] = {kv::KvFormat::kF16, kv::KvFormat::kInt4, kv::KvFormat::kInt2};
  auto pools =
      kv::KvPools::Create(m.decoder().KvLayout(kv::KvFormat::kF16), formats, int64_t{2} << 30);
  if (!pools.ok()) return fail(pools.status());

  for (const int64_t target : lengths) {
    auto f = FramesFor(m, target);
    if (!f.ok()) return fail(f.status());
    auto ctx = BuildContext(m, *frames, *f);
    if (!ctx.ok()) return fail(Annotate(ctx.status(), "building the video context"));
    const int64_t n = static_cast<int64_t>(ctx->ids.size());
    const std::string tag = fmt::format("{}k", (target + 512) / 1024);
    std::printf("-- %lld tokens (%lld frames)%s\n", static_cast<long long>(n),
                static_cast<long long>(*f),
                n > tc.max_position_embeddings ? " — beyond max_position_embeddings" : "");
    auto prefills = InterleavedPrefills(m, **pools, policy, *ctx, prefill_rounds);
    if (!prefills.ok()) return fail(prefills.status());
    PrefillRun* const dense = &prefills->first;
    PrefillRun* const sparse = &prefills->second;
    const auto& stats = sparse->seq->prefill_stats;
    const std::vector<float> kept = stats.KeptRatios();
    // Rows that ran through each layer over the rows fed (below 1 where rows were removed).
    std::vector<float> rows_ratio;
    for (const int64_t ran : stats.tokens) {
      rows_ratio.push_back(stats.fed > 0 ? static_cast<float>(ran) / stats.fed : 1.f);
    }
    const double mean_kept = std::accumulate(kept.begin(), kept.end(), 0.0) / kept.size();
    std::printf("kept ratio per layer: %s; rows run per layer: %s\n", Ratios(kept).c_str(),
                Ratios(rows_ratio).c_str());
    report.Add(fmt::format("prefill_ms_dense_{}", tag), dense->ms, "ms");
    report.Add(fmt::format("prefill_ms_{}_{}", ptag, tag), sparse->ms, "ms");
    report.Add(fmt::format("prefill_speedup_{}", tag), dense->ms / sparse->ms, "x",
               PrefillSpeedupTarget(ptag, target));
    report.Add(fmt::format("context_tokens_{}", tag), static_cast<double>(n), "tokens");
    for (size_t l = 0; l < rows_ratio.size(); ++l) {
      report.Add(fmt::format("rows_ratio_{}_layer{}", tag, l), rows_ratio[l], "fraction");
    }
    report.Add(fmt::format("selection_overhead_ms_{}", tag), sparse->selection_ms, "ms");
    report.Add(fmt::format("selection_overhead_fraction_{}", tag),
               sparse->selection_ms / sparse->ms, "fraction");
    // What the rows and keys the policy leaves out save by themselves, its planning counted as
    // free: the ceiling a faster selection could reach on this model (bench/RESULTS.md,
    // "Dynamic-LLaVA at 64 frames").
    report.Add(fmt::format("prefill_speedup_without_selection_{}", tag),
               dense->ms / (sparse->ms - sparse->selection_ms), "x");
    report.Add(fmt::format("kept_ratio_mean_{}", tag), mean_kept, "fraction");
    for (size_t l = 0; l < kept.size(); ++l) {
      report.Add(fmt::format("kept_ratio_{}_layer{}", tag, l), kept[l], "fraction");
    }
    const double f16_bytes = static_cast<double>(dense->seq->kv.bytes());
    report.Add(fmt::format("kv_bytes_f16_{}", tag), f16_bytes, "bytes");
    report.Add(fmt::format("kv_bytes_{}_{}", ptag, tag),
               static_cast<double>(sparse->seq->kv.bytes()), "bytes");
    report.Add(fmt::format("kv_ratio_f16_over_{}_{}", ptag, tag),
               f16_bytes / static_cast<double>(sparse->seq->kv.bytes()), "x",
               ptag == "zipvl" ? std::optional<double>(4.0) : std::nullopt);
    if (const std::optional<double> ratio = LowRankBlockRatio(sparse->seq->kv)) {
      // AttentionPack's visual block alone, against the f16 pages those tokens would take.
      const bool int4 = policy.find("factors=int4") != std::string::npos;
      report.Add(fmt::format("low_rank_block_ratio_f16_over_{}_{}", ptag, tag), *ratio, "x",
                 int4 ? 12.0 : 4.0);
    }
    if (target != decode_context) continue;

    // The same context as the KV store holds it: f16 vs the compressing policy (and kivi).
    auto stored_dense = StoredBytes(*dense->seq, "none", ctx->ids);
    if (!stored_dense.ok()) return fail(Annotate(stored_dense.status(), "storing f16 KV"));
    auto stored_sparse = StoredBytes(*sparse->seq, policy, ctx->ids);
    if (!stored_sparse.ok()) return fail(Annotate(stored_sparse.status(), "storing KV"));
    report.Add(fmt::format("store_bytes_f16_{}", tag), static_cast<double>(*stored_dense), "bytes");
    report.Add(fmt::format("store_bytes_{}_{}", ptag, tag), static_cast<double>(*stored_sparse),
               "bytes");
    report.Add(fmt::format("store_ratio_f16_over_{}_{}", ptag, tag),
               static_cast<double>(*stored_dense) / static_cast<double>(*stored_sparse), "x");

    auto kivi = RunPrefill(m, **pools, "kivi", *ctx);
    if (!kivi.ok()) return fail(kivi.status());
    report.Add(fmt::format("kv_bytes_kivi_{}", tag), static_cast<double>(kivi->seq->kv.bytes()),
               "bytes");
    auto stored_kivi = StoredBytes(*kivi->seq, "kivi", ctx->ids);
    if (!stored_kivi.ok()) return fail(Annotate(stored_kivi.status(), "storing kivi KV"));
    report.Add(fmt::format("store_bytes_kivi_{}", tag), static_cast<double>(*stored_kivi), "bytes");
    std::vector<int64_t> stored_before;
    for (int l = 0; l < sparse->seq->kv.num_layers(); ++l) {
      stored_before.push_back(sparse->seq->kv.num_tokens(l));
    }
    std::vector<PrefillRun*> runs = {&*dense, &*sparse, &*kivi};
    auto tps = InterleavedDecodeRates(m, runs, decode_steps);
    if (!tps.ok()) return fail(tps.status());
    report.Add(fmt::format("decode_tokens_per_s_f16_{}", tag), (*tps)[0], "tokens/s");
    report.Add(fmt::format("decode_tokens_per_s_{}_{}", ptag, tag), (*tps)[1], "tokens/s");
    // "Decode not slower": the compressed cache's rate over the f16 one, target 1; AttentionPack
    // rebuilds every key from its factors each step, so its target is 0.8 of f16.
    report.Add(fmt::format("decode_speed_{}_over_f16_{}", ptag, tag), (*tps)[1] / (*tps)[0], "x",
               ptag.find("attentionpack") != std::string::npos ? 0.8 : 1.0);
    report.Add(fmt::format("kv_bytes_{}_after_decode_{}", ptag, tag),
               static_cast<double>(sparse->seq->kv.bytes()), "bytes");
    // Tokens stored per generated token in each layer (Dynamic-LLaVA's text gating: 0.5 from
    // sparse_layer on at text_keep=0.5; 1 without gating).
    for (int l = 0; l < sparse->seq->kv.num_layers(); ++l) {
      const int64_t grown = sparse->seq->kv.num_tokens(l) - stored_before[static_cast<size_t>(l)];
      report.Add(fmt::format("kv_tokens_per_generated_{}_{}_layer{}", ptag, tag, l),
                 static_cast<double>(grown) / decode_steps, "tokens");
    }
    report.Add(fmt::format("decode_tokens_per_s_kivi_{}", tag), (*tps)[2], "tokens/s");
  }
  if (budget_mib > 0) {
    // Sessions of a 64-frame video (the longest the model was trained on) in a fixed budget.
    auto ctx = BuildContext(m, *frames, 64);
    if (!ctx.ok()) return fail(Annotate(ctx.status(), "building the 64-frame context"));
    const int64_t budget = int64_t{budget_mib} << 20;
    auto dense = FillBudget(m, "none", *ctx, budget, 4);
    if (!dense.ok()) return fail(Annotate(dense.status(), "filling the budget with f16 sessions"));
    auto packed = FillBudget(m, policy, *ctx, budget, 4);
    if (!packed.ok()) return fail(Annotate(packed.status(), "filling the budget"));
    std::printf("-- %d MiB of KV: %lld f16 sessions of 64 frames, %lld %s\n", budget_mib,
                static_cast<long long>(dense->sessions), static_cast<long long>(packed->sessions),
                ptag.c_str());
    report.Add("sessions_in_budget_f16", static_cast<double>(dense->sessions), "sessions");
    report.Add(fmt::format("sessions_in_budget_{}", ptag), static_cast<double>(packed->sessions),
               "sessions");
    report.Add(fmt::format("sessions_ratio_{}_over_f16", ptag),
               static_cast<double>(packed->sessions) / static_cast<double>(dense->sessions), "x",
               ptag == "attentionpack" ? std::optional<double>(3.0) : std::nullopt);
    report.Add("aggregate_decode_tokens_per_s_f16", dense->decode_tokens_per_s, "tokens/s");
    report.Add(fmt::format("aggregate_decode_tokens_per_s_{}", ptag), packed->decode_tokens_per_s,
               "tokens/s");
  }
  report.Add("peak_rss", bench::Report::PeakRssMiB(), "MiB");
  if (json) std::printf("%s\n", report.Json().c_str());
  return 0;
}

}  // namespace framezip::cli
