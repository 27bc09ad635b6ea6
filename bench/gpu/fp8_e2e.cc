#include "bench/gpu/fp8_e2e.h"
#include "bench/gpu/model_e2e.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/llm/quantized_projections.h"
#include "engine/ops/linear.h"
#include "engine/ops/sample.h"
#include "engine/synthetic/random_decoder_weights.h"

namespace framezip::benchgpu {
namespace {

using engine::DType;
using engine::Tensor;
namespace llm = engine::llm;

constexpr int64_t kContext = 1024;
constexpr int kSteps = 32;

bool Ok(const Status& s, const char* what) { return SectionStepOk(s, "FP8", what); }

// Tokens/s of batch-1 decode after a kContext-token prompt, the median of 3 runs of kSteps steps
// (forward pass and greedy pick on the device, the id back to the host), and the decoder's weight
// bytes on the GPU. Negative on a failure, printed.
struct DecodeFigures {
  double tokens_per_s = -1;
  double weight_gb = -1;
  size_t weight_bytes = 0;
  size_t session_kv_bytes = 0;  // the KV pages one kContext-token sequence holds (f16)
};

DecodeFigures DecodeBatch1(const llm::DecoderShape& shape, const llm::DecoderWeights& weights) {
  auto dec = llm::Decoder::Create(shape, weights, engine::Device::Cuda(0));
  if (!Ok(dec.status(), "weights to the GPU")) return {};
  const llm::Decoder& d = **dec;
  const engine::kv::KvFormat format = engine::kv::KvFormat::kF16;
  auto pools = engine::kv::KvPools::Create(d.KvLayout(format, 16), {&format, 1}, int64_t{4} << 30,
                                           engine::Device::Cuda(0));
  if (!Ok(pools.status(), "KV pool")) return {};
  auto seq = d.NewSequence(**pools, format, "none");
  if (!Ok(seq.status(), "sequence")) return {};
  std::vector<int32_t> ids(static_cast<size_t>(kContext));
  for (int64_t i = 0; i < kContext; ++i) ids[static_cast<size_t>(i)] = (i * 7919) % shape.vocab;
  auto embeds = d.Embed(ids);
  if (!Ok(embeds.status(), "embedding")) return {};
  if (!Ok(d.Prefill(**seq, *embeds).status(), "prefill")) return {};
  const size_t session_kv_bytes = (*seq)->kv.bytes();  // before decode adds its tokens
  llm::Sequence* one[] = {seq->get()};
  std::vector<int32_t> token = {42};
  const std::vector<engine::ops::RowSampling> greedy(1);
  auto step = [&]() -> Status {
    FZ_ASSIGN_OR_RETURN(Tensor logits, d.DecodeStep(one, token));
    return engine::ops::SampleTokens(logits, greedy, token);
  };
  if (!Ok(step(), "decode warm-up")) return {};
  std::vector<double> runs;
  for (int r = 0; r < 3; ++r) {
    cudaDeviceSynchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kSteps; ++i) {
      if (!Ok(step(), "decode")) return {};
    }
    cudaDeviceSynchronize();
    runs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(runs.begin(), runs.end());
  return {kSteps / runs[1], static_cast<double>(d.weight_bytes()) * 1e-9, d.weight_bytes(),
          session_kv_bytes};
}

// Sessions of kContext tokens a memory budget for the decoder's weights and KV holds: what the
// weights leave, in whole sessions of the KV bytes one measured sequence holds (the pool admits
// by pages, so this is its count).
int64_t SessionsInBudget(size_t budget_bytes, const DecodeFigures& f) {
  if (f.session_kv_bytes == 0 || f.weight_bytes >= budget_bytes) return 0;
  return static_cast<int64_t>((budget_bytes - f.weight_bytes) / f.session_kv_bytes);
}

// `tied`: the head is the embedding in bf16 (Qwen2-0.5B); FP8 gives the head its own copy, as
// --weight-format fp8 does.
void Section(const llm::DecoderShape& shape, bool tied, const std::string& label, double budget_gib,
             std::vector<E2eRow>& rows) {
  auto host = llm::MakeRandomDecoderWeights(
      shape, {.dtype = DType::kBF16, .seed = 3, .stddev = 0.02f, .tied_lm_head = tied});
  if (!Ok(host.status(), "random weights")) return;
  const DecodeFigures bf16 = DecodeBatch1(shape, host->weights);
  llm::DecoderWeights fp8 = host->weights;
  auto kept = engine::llm::QuantizeProjectionsFp8(fp8);
  if (!Ok(kept.status(), "quantisation")) return;
  const DecodeFigures f8 = DecodeBatch1(shape, fp8);
  if (bf16.tokens_per_s <= 0 || f8.tokens_per_s <= 0) return;
  const std::string at = " at " + std::to_string(kContext) + " context, " + label;
  rows.push_back(
      {"FP8 section decode batch 1" + at + ", bf16 weights", bf16.tokens_per_s, "tokens/s"});
  rows.push_back(
      {"FP8 section decode batch 1" + at + ", fp8 weights", f8.tokens_per_s, "tokens/s"});
  rows.push_back({"FP8 over bf16 decode batch 1" + at, f8.tokens_per_s / bf16.tokens_per_s, "x"});
  rows.push_back({"decoder weights on the GPU, " + label + ", bf16", bf16.weight_gb, "GB"});
  rows.push_back({"decoder weights on the GPU, " + label + ", fp8", f8.weight_gb, "GB"});
  // The same memory holding weights and KV: the bytes FP8 saves become sessions.
  const size_t budget = static_cast<size_t>(budget_gib * double(size_t{1} << 30));
  const int64_t held_bf16 = SessionsInBudget(budget, bf16), held_fp8 = SessionsInBudget(budget, f8);
  const std::string in = " of " + std::to_string(kContext) +
                         " tokens in one memory budget for decoder weights and KV, " + label;
  rows.push_back({"memory budget of the sessions rows, " + label, budget_gib, "GiB"});
  rows.push_back(
      {"KV of one session" + in, static_cast<double>(bf16.session_kv_bytes) / (1 << 20), "MiB"});
  rows.push_back({"sessions" + in + ", bf16 weights", static_cast<double>(held_bf16), "sessions"});
  rows.push_back({"sessions" + in + ", fp8 weights", static_cast<double>(held_fp8), "sessions"});
  if (held_bf16 > 0) {
    rows.push_back({"FP8 over bf16 sessions" + in,
                    static_cast<double>(held_fp8) / static_cast<double>(held_bf16), "x"});
  }
}

}  // namespace

std::vector<E2eRow> Fp8DecodeEndToEnd(bool quick) {
  if (!engine::ops::Fp8LinearAvailable(engine::Device::Cuda(0))) {
    std::printf(
        "FP8 section skipped: this GPU has no FP8 GEMMs with per-channel scales "
        "(sm_90)\n");
    return {};
  }
  std::vector<E2eRow> rows;
  // Budgets a little over each shape's bf16 weights (0.99 GB and 15.2 GB), as a GPU serving
  // the model holds them: the KV beside the weights is where FP8's savings show.
  Section(llm::Qwen2_0_5BShape(), true, "Qwen2-0.5B shape", 1.5, rows);
  if (!quick) Section(llm::Qwen2_7BShape(), false, "Qwen2-7B shape", 20, rows);
  return rows;
}

}  // namespace framezip::benchgpu
