// framezip bench engine: the CPU engine's throughput on the Qwen2-0.5B shape with random bf16
// weights built in memory (no files), next to this machine's own limits measured in the same run:
//   - sgemm GFLOP/s (ops::MatMul, f32, 2048³, all compute threads) and read bandwidth GB/s;
//   - the physical compute ceiling: f32 FMA GFLOP/s of independent FMAs on the widest vector unit
//     (engine/ops/cpu_isa.h), and sgemm and the prefill GEMMs as fractions of it;
//   - prefill GEMM GFLOP/s at the decoder's Linear shapes (bf16 weights) as a fraction of sgemm
//     (target >= 0.70), prefill tokens/s at 512 and 2048 tokens, and the ms of a 32-token
//     follow-up prefilled onto the 512-token conversation; on a CPU with AMX also the
//     TDPBF16PS peak, and the AMX GEMM next to the sgemm path it replaces, timed alternately;
//   - decode GEMV GFLOP/s at 16 rows (the hand-written kernel on its ISA) as a fraction of peak;
//   - decode tokens/s at batch 1, 8 and 16, and 16 over 1 (continuous batching's gain, target
//     >= 4); batch-1 weight bytes per step / time as a fraction of the bandwidth (target >= 0.60);
//   - decode tokens/s at batch 1 with 4-bit KV (policy kivi4) after a 512-token prompt;
//   - vision tower ms per frame at the SigLIP-so400m shape (engine/vision), peak RSS.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <vector>

#include "engine/core/step_counters.h"
#include "engine/core/thread_pool.h"
#include "engine/kv/kv_pools.h"
#include "engine/kv/page_pool.h"
#include "engine/llm/decoder.h"
#include "engine/llm/quantized_projections.h"
#include "engine/ops/amx_weight_cache.h"
#include "engine/ops/cpu_isa.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/gemm_amx.h"
#include "engine/ops/gemm_int8.h"
#include "engine/ops/linear.h"
#include "engine/runtime/decoder_loading.h"
#include "engine/runtime/weight_format.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "engine/synthetic/random_model_weights.h"
#include "engine/synthetic/vision_bench.h"
#include "tools/bench/bench_report.h"
#include "tools/framezip/cli_util.h"
#include "tools/framezip/subcommands.h"

namespace framezip::cli {
namespace {

using engine::DType;
using engine::Tensor;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Best-of-`reps` seconds of fn().
template <typename F>
double BestOf(int reps, F&& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, Seconds(t0));
  }
  return best;
}

StatusOr<double> SgemmGflops() {
  const int64_t n = 2048;
  FZ_ASSIGN_OR_RETURN(Tensor a, engine::llm::RandomTensor({n, n}, DType::kF32, 1, 1.f));
  FZ_ASSIGN_OR_RETURN(Tensor b, engine::llm::RandomTensor({n, n}, DType::kF32, 2, 1.f));
  FZ_ASSIGN_OR_RETURN(Tensor c, Tensor::Empty({n, n}, DType::kF32));
  Status st;
  const double s = BestOf(3, [&] { st.Update(engine::ops::MatMul(a, b, true, c)); });
  FZ_RETURN_IF_ERROR(st);
  return 2.0 * n * n * n / s / 1e9;
}

// Read bandwidth: every compute thread streams its share of a 1 GiB buffer once per pass.
StatusOr<double> ReadBandwidthGBs() {
  const int64_t n = int64_t{1} << 28;  // floats
  FZ_ASSIGN_OR_RETURN(Tensor buf, engine::llm::RandomTensor({n}, DType::kF32, 3, 1.f));
  const float* p = buf.data<float>();
  std::vector<float> sink(1024);
  const int threads = engine::ComputeThreads();
  const double s = BestOf(3, [&] {
    engine::ComputePool().ParallelFor(threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = n / threads * t, e = t + 1 == threads ? n : n / threads * (t + 1);
        sink[t] += engine::ops::cpu::Dot(p + b, p + b, e - b);
      }
    });
  });
  return n * 4.0 / s / 1e9;
}

// GFLOP/s of the decoder's seven Linear shapes at `m` rows, bf16 weights.
StatusOr<double> PrefillGemmGflops(const engine::model::TextConfig& c, int64_t m) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kvd = c.kv_dim(), im = c.intermediate_size;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{q, h},  {kvd, h}, {kvd, h}, {h, q},
                                                           {im, h}, {im, h},  {h, im}};
  double flops = 0, secs = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [n, k] = shapes[i];
    FZ_ASSIGN_OR_RETURN(Tensor x, engine::llm::RandomTensor({m, k}, DType::kF32, 10 + i, 1.f));
    FZ_ASSIGN_OR_RETURN(Tensor w, engine::llm::RandomTensor({n, k}, DType::kBF16, 20 + i, .02f));
    FZ_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({m, n}, DType::kF32));
    Status st;
    secs += BestOf(2, [&] { st.Update(engine::ops::Linear(x, w, Tensor(), y)); });
    FZ_RETURN_IF_ERROR(st);
    flops += 2.0 * m * n * k;
  }
  return flops / secs / 1e9;
}

// GFLOP/s of batched decode's GEMV (ops::Linear on `m` rows: the hand-written few-row kernel of
// engine/ops/cpu_kernels.h on its dispatched ISA) at the MLP's up-projection shape, one weight
// per layer so the weights stream from memory as in a decode step.
StatusOr<double> DecodeGemvGflops(const engine::model::TextConfig& c, int64_t m) {
  const int64_t n = c.intermediate_size, k = c.hidden_size, layers = c.num_hidden_layers;
  FZ_ASSIGN_OR_RETURN(Tensor x, engine::llm::RandomTensor({m, k}, DType::kF32, 30, 1.f));
  FZ_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({m, n}, DType::kF32));
  std::vector<Tensor> weights;
  for (int64_t l = 0; l < layers; ++l) {
    FZ_ASSIGN_OR_RETURN(Tensor w, engine::llm::RandomTensor({n, k}, DType::kBF16, 40 + l, .02f));
    weights.push_back(std::move(w));
  }
  Status st;
  const double s = BestOf(3, [&] {
    for (const Tensor& w : weights) st.Update(engine::ops::Linear(x, w, Tensor(), y));
  });
  FZ_RETURN_IF_ERROR(st);
  return 2.0 * m * n * k * layers / s / 1e9;
}

// Bytes of weights one decode step reads (all layers + final norm + lm_head).
double DecodeWeightBytes(const engine::llm::DecoderWeights& w) {
  double bytes = static_cast<double>(w.norm.nbytes() + w.lm_head.nbytes());
  if (w.lm_head_scale.defined()) bytes += static_cast<double>(w.lm_head_scale.nbytes());
  for (const auto& l : w.layers) {
    for (const Tensor* t : {&l.input_layernorm, &l.q_proj, &l.q_bias, &l.k_proj, &l.k_bias,
                            &l.v_proj, &l.v_bias, &l.o_proj, &l.post_attention_layernorm,
                            &l.gate_proj, &l.up_proj, &l.down_proj, &l.q_scale, &l.k_scale,
                            &l.v_scale, &l.o_scale, &l.gate_scale, &l.up_scale, &l.down_scale}) {
      if (t->defined()) bytes += static_cast<double>(t->nbytes());
    }
  }
  return bytes;
}

}  // namespace

int RunBenchEngine(const std::vector<std::string>& args) {
  int threads = 2, decode_steps = 24;
  bool json = false, skip_vision = false;
  std::string weight_format = "bf16", vision_weight_format = "bf16";
  FlagSet flags("framezip bench engine",
                "CPU engine throughput on the Qwen2-0.5B shape (random bf16 weights in memory) "
                "next to this machine's measured sgemm rate and memory bandwidth.");
  flags.Int("threads", &threads, "compute threads");
  flags.Int("decode-steps", &decode_steps, "decode steps timed per batch size");
  flags.Bool("skip-vision", &skip_vision, "leave out the vision tower timing");
  flags.String("weight-format", &weight_format,
               "the decoder's projections: bf16, or int8 (quantised from the bf16 weights at "
               "load: engine/runtime/weight_format.h)",
               "F");
  flags.String("vision-weight-format", &vision_weight_format,
               "the vision tower's projections: bf16, or int8 (quantised at load)", "F");
  flags.Bool("json", &json, "print one JSON object as the last line");
  if (auto code = ParseOrExit(flags, args)) return *code;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "framezip bench engine: %s\n", MessageOf(s).c_str());
    return 1;
  };
  auto format = engine::runtime::ParseWeightFormat(weight_format);
  if (!format.ok()) return fail(Annotate(format.status(), "--weight-format"));
  if (Status s = engine::runtime::CheckWeightFormat(*format, engine::Device::Cpu()); !s.ok()) {
    return fail(s);
  }
  auto vision_format = engine::runtime::ParseWeightFormat(vision_weight_format);
  if (!vision_format.ok()) return fail(Annotate(vision_format.status(), "--vision-weight-format"));
  if (Status s = engine::runtime::CheckWeightFormat(*vision_format, engine::Device::Cpu());
      !s.ok()) {
    return fail(Annotate(s, "--vision-weight-format"));
  }
  engine::SetComputeThreads(threads);
  bench::Machine machine = bench::DetectMachine();
  machine.threads = threads;
  bench::Report report("engine", machine);

  auto sgemm = SgemmGflops();
  if (!sgemm.ok()) return fail(sgemm.status());
  report.Add("sgemm_gflops", *sgemm, "GFLOP/s");
  auto bw = ReadBandwidthGBs();
  if (!bw.ok()) return fail(bw.status());
  report.Add("read_bandwidth", *bw, "GB/s");
  // The physical compute ceiling: independent FMAs on the widest vector unit, every thread.
  auto peak = engine::ops::cpu::PeakFmaGflops(engine::ComputeThreads());
  if (!peak.ok()) return fail(peak.status());
  report.Add("peak_fma_gflops_" + engine::ops::cpu::PeakIsa(), *peak, "GFLOP/s");
  report.Add("sgemm_fraction_of_peak", *sgemm / *peak, "fraction");
  // Whether a bf16 GEMM could pay on this CPU: vdpbf16ps against the f32 FMA peak, same threads.
  if (auto bf16 = engine::ops::cpu::PeakBf16DotGflops(engine::ComputeThreads()); bf16.ok()) {
    report.Add("peak_bf16_dot_gflops", *bf16, "GFLOP/s");
    report.Add("bf16_dot_over_fma_peak", *bf16 / *peak, "ratio");
  }
  const bool amx = engine::ops::cpu::AmxGemmEnabled();
  double amx_peak = 0;
  if (amx) {
    auto p = engine::ops::cpu::PeakAmxBf16Gflops(engine::ComputeThreads());
    if (!p.ok()) return fail(p.status());
    amx_peak = *p;
    report.Add("peak_amx_bf16_gflops", amx_peak, "GFLOP/s");
    report.Add("amx_over_fma_peak", amx_peak / *peak, "ratio");
  }

  const engine::model::TextConfig config = engine::runtime::Qwen2_0_5BConfig();
  for (int64_t m : {512, 2048}) {
    auto g = PrefillGemmGflops(config, m);
    if (!g.ok()) return fail(g.status());
    report.Add(fmt::format("prefill_gemm_gflops_{}", m), *g, "GFLOP/s");
    report.Add(fmt::format("prefill_gemm_fraction_of_sgemm_{}", m), *g / *sgemm, "fraction", 0.70);
    // A fraction of the peak of the unit that ran it: the tile unit's where Linear used AMX.
    report.Add(fmt::format("prefill_gemm_fraction_of_peak_{}", m), *g / (amx ? amx_peak : *peak),
               "fraction");
    if (!amx) continue;
    // The same shapes on the f32 sgemm path that the AMX kernel replaces, right after it.
    auto f32 = [&] {
      engine::ops::cpu::ScopedF32Gemm f32_gemm;
      return PrefillGemmGflops(config, m);
    }();
    if (!f32.ok()) return fail(f32.status());
    report.Add(fmt::format("prefill_gemm_gflops_sgemm_path_{}", m), *f32, "GFLOP/s");
    report.Add(fmt::format("prefill_gemm_amx_over_sgemm_path_{}", m), *g / *f32, "x");
  }

  auto gemv = DecodeGemvGflops(config, 16);
  if (!gemv.ok()) return fail(gemv.status());
  report.Add("decode_gemv_gflops_m16", *gemv, "GFLOP/s");
  report.Add("decode_gemv_fraction_of_peak_m16", *gemv / *peak, "fraction");

  const auto t_setup = Clock::now();
  auto random = engine::runtime::MakeRandomDecoderWeights(config, DType::kBF16, 7);
  if (!random.ok()) return fail(random.status());
  if (*format == engine::runtime::WeightFormat::kInt8) {
    if (Status s = engine::llm::QuantizeProjectionsInt8(random->weights); !s.ok()) {
      return fail(s);
    }
    // The bf16 projections are dropped, as a loaded model's are, so that peak_rss counts the
    // int8 ones only.
    std::set<const void*> kept = {random->weights.embed_tokens.raw_data(),
                                  random->weights.norm.raw_data()};
    for (const auto& l : random->weights.layers) {
      for (const Tensor* t : {&l.input_layernorm, &l.post_attention_layernorm, &l.q_bias, &l.k_bias,
                              &l.v_bias, &l.o_bias, &l.gate_bias, &l.up_bias, &l.down_bias}) {
        if (t->defined()) kept.insert(t->raw_data());
      }
    }
    std::erase_if(random->storage, [&](const Tensor& t) { return !kept.contains(t.raw_data()); });
    std::printf(
        "(int8 projections: %s kernel for few rows, %s for many)\n",
        std::string(engine::ops::cpu::Int8KernelName(engine::ops::cpu::Int8GemvKernel())).c_str(),
        std::string(engine::ops::cpu::Int8KernelName(engine::ops::cpu::Int8GemmKernel())).c_str());
  }
  report.Add("weight_bits", *format == engine::runtime::WeightFormat::kInt8 ? 8 : 16, "bits");
  // The decoder takes the weights over, as an engine's does: what it does not keep is freed (int8
  // projections are kept in their packed layout only, ops::PackLinearWeight).
  auto decoder = engine::runtime::CreateDecoder(config, std::move(random->weights));
  if (!decoder.ok()) return fail(decoder.status());
  // What the loaded decoder holds (weights, packed layouts, caches), with no load-time copies:
  // the heap's freed pages (the bf16 weights, the row-major int8 ones) go back to the system
  // first, or they would count.
  malloc_trim(0);
  report.Add("resident_after_load", bench::Report::ResidentMiB(), "MiB");
  std::printf("(random Qwen2-0.5B %s weights built in %.1f s)\n", weight_format.c_str(),
              Seconds(t_setup));
  const engine::llm::Decoder& dec = **decoder;
  auto pool = engine::kv::PagePool::Create(dec.KvLayout(engine::kv::KvFormat::kF16), 100000);
  if (!pool.ok()) return fail(pool.status());

  auto ids_of = [&](int64_t n) {
    std::vector<int32_t> ids(n);
    for (int64_t i = 0; i < n; ++i)
      ids[i] = static_cast<int32_t>((i * 7919 + 13) % config.vocab_size);
    return ids;
  };
  std::unique_ptr<engine::llm::Sequence> ctx512, ctx2048;
  for (int64_t t : {512, 2048}) {
    auto seq = dec.NewSequence(pool->get());
    if (!seq.ok()) return fail(seq.status());
    auto embeds = dec.Embed(ids_of(t));
    if (!embeds.ok()) return fail(embeds.status());
    const auto t0 = Clock::now();
    auto logits = dec.Prefill(**seq, *embeds);
    if (!logits.ok()) return fail(logits.status());
    const double s = Seconds(t0);
    report.Add(fmt::format("prefill_tokens_per_s_{}", t), t / s, "tokens/s");
    if (t == 512) ctx512 = std::move(*seq);
    if (t == 2048) ctx2048 = std::move(*seq);
  }

  const double step_bytes = DecodeWeightBytes(dec.weights());
  double batch1_tokens_per_s = 0;
  for (int batch : {1, 8, 16}) {
    std::vector<std::unique_ptr<engine::llm::Sequence>> owned;
    std::vector<engine::llm::Sequence*> seqs;
    if (batch == 1) {
      seqs.push_back(ctx512.get());  // decode after a 512-token prompt
    } else {
      for (int b = 0; b < batch; ++b) {
        auto seq = dec.NewSequence(pool->get());
        if (!seq.ok()) return fail(seq.status());
        // Batch 16 gets shorter prompts (32-88 tokens) so its prefill stays short on 2 cores.
        auto embeds = dec.Embed(ids_of(batch == 8 ? 64 + 16 * b : 32 + 8 * (b % 8)));
        if (!embeds.ok()) return fail(embeds.status());
        if (auto l = dec.Prefill(**seq, *embeds); !l.ok()) return fail(l.status());
        seqs.push_back(seq->get());
        owned.push_back(std::move(*seq));
      }
    }
    std::vector<int32_t> tokens(batch, 42);
    auto step = [&] { return dec.DecodeStep(seqs, tokens); };
    if (auto w = step(); !w.ok()) return fail(w.status());  // warm-up
    const auto t0 = Clock::now();
    for (int i = 0; i < decode_steps; ++i) {
      auto l = step();
      if (!l.ok()) return fail(l.status());
    }
    const double per_step = Seconds(t0) / decode_steps;
    report.Add(fmt::format("decode_tokens_per_s_batch{}", batch), batch / per_step, "tokens/s");
    if (batch == 16) {
      // Continuous batching's point: one step reads the weights once for every sequence.
      report.Add("decode_batch16_over_batch1", batch / per_step / batch1_tokens_per_s, "x", 4.0);
      // What one step hands its device (engine/core/step_counters.h): on the CPU, the planned
      // step's one upload and its per-layer launches (0 plans: FRAMEZIP_EAGER_STEPS=1).
      const engine::StepCountScope scope;
      if (auto l = step(); !l.ok()) return fail(l.status());
      const engine::StepCounts c = scope.Elapsed();
      report.Add("decode_batch16_step_plans_per_step", static_cast<double>(c.plan_uploads),
                 "count");
      report.Add("decode_batch16_copies_per_step", static_cast<double>(c.copies()), "count");
      report.Add("decode_batch16_host_syncs_per_step", static_cast<double>(c.host_syncs),
                 "count");
      report.Add("decode_batch16_launches_per_step", static_cast<double>(c.launches), "count");
    }
    if (batch == 1) {
      batch1_tokens_per_s = batch / per_step;
      const double gbs = step_bytes / per_step / 1e9;
      report.Add("decode_batch1_weight_gb_per_s", gbs, "GB/s");
      report.Add("decode_batch1_fraction_of_bandwidth", gbs / *bw, "fraction", 0.60);
    }
  }
  {
    // A follow-up question: 32 more tokens prefilled onto that conversation (turn 2's time to
    // first token, its sampling aside). 32 rows is where Linear's path matters: GEMV kernel or
    // widen-and-sgemm (engine/ops/linear_cpu.cc).
    auto embeds = dec.Embed(ids_of(32));
    if (!embeds.ok()) return fail(embeds.status());
    const auto t0 = Clock::now();
    if (auto l = dec.Prefill(*ctx512, *embeds); !l.ok()) return fail(l.status());
    report.Add("followup_prefill_ms_32", Seconds(t0) * 1e3, "ms");
  }
  ctx512.reset();

  {
    // Batch-1 decode deeper in the context (after the 2048-token prompt), where attention over
    // the cache is a larger share of a step: llama.cpp's depth-2048 row (bench/peers).
    engine::llm::Sequence* one[] = {ctx2048.get()};
    const int32_t token[] = {42};
    const auto t0 = Clock::now();
    for (int i = 0; i < decode_steps; ++i) {
      if (auto l = dec.DecodeStep(one, token); !l.ok()) return fail(l.status());
    }
    report.Add("decode_tokens_per_s_batch1_depth2048", decode_steps / Seconds(t0), "tokens/s");
    ctx2048.reset();
  }

  {
    // Decode with 4-bit KV (KIVI, policy kivi4: int4 pages past its residual window) after a
    // 512-token prompt: the row llama.cpp's q4_0 KV cache is compared with (bench/peers).
    const engine::kv::KvFormat formats[] = {engine::kv::KvFormat::kF16,
                                            engine::kv::KvFormat::kInt4};
    auto pools = engine::kv::KvPools::Create(dec.KvLayout(engine::kv::KvFormat::kF16), formats,
                                             int64_t{4} << 30);
    if (!pools.ok()) return fail(pools.status());
    auto seq = dec.NewSequence(**pools, engine::kv::KvFormat::kF16, "kivi4");
    if (!seq.ok()) return fail(seq.status());
    auto embeds = dec.Embed(ids_of(512));
    if (!embeds.ok()) return fail(embeds.status());
    if (auto l = dec.Prefill(**seq, *embeds); !l.ok()) return fail(l.status());
    engine::llm::Sequence* one[] = {seq->get()};
    const int32_t token[] = {42};
    const auto t0 = Clock::now();
    for (int i = 0; i < decode_steps; ++i) {
      if (auto l = dec.DecodeStep(one, token); !l.ok()) return fail(l.status());
    }
    report.Add("decode_tokens_per_s_batch1_kv4", decode_steps / Seconds(t0), "tokens/s");
  }

  if (!skip_vision) {
    engine::vision::VisionTimingOptions vopt;
    vopt.frames = 1;
    vopt.iterations = 1;
    vopt.warmup = false;
    vopt.int8_projections = *vision_format == engine::runtime::WeightFormat::kInt8;
    auto vt = engine::vision::TimeVisionTower(engine::vision::SiglipSo400mConfig(), vopt);
    if (!vt.ok()) return fail(vt.status());
    report.Add("vision_tower_ms_per_frame", vt->ms_per_frame, "ms");
    report.Add("vision_tower_gflops", vt->gflops_per_frame / (vt->ms_per_frame / 1e3), "GFLOP/s");
  }
  // The AMX path's second copy of the bf16 weights it has read (ops/amx_weight_cache.h), part of
  // peak_rss: 0 where the CPU has no AMX or the weights are not bf16.
  report.Add("amx_packed_weights",
             static_cast<double>(engine::ops::cpu::PackedAmxWeightBytes()) / (1 << 20), "MiB");
  report.Add("peak_rss", bench::Report::PeakRssMiB(), "MiB");
  if (json) std::printf("%s\n", report.Json().c_str());
  return 0;
}

}  // namespace framezip::cli
