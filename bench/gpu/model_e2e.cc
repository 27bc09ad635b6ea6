#include "bench/gpu/model_e2e.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "engine/core/step_counters.h"
#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/ops/sample.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "engine/vision/vision_tower.h"

namespace framezip::benchgpu {
namespace {

using engine::DType;
using engine::Tensor;
namespace llm = engine::llm;

std::vector<int32_t> Ids(int64_t n, int64_t vocab, int32_t salt) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919 + salt * 104729) % vocab);
  return ids;
}

// Wall seconds of fn() with the device drained before and after (the ops launch on the default
// stream and some of them synchronise on host copies, so wall time is what a caller sees).
template <class F>
double Seconds(F&& fn) {
  cudaDeviceSynchronize();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  cudaDeviceSynchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One decode step as a server runs it: the forward pass, then the device sampler (greedy here)
// picks each sequence's next token, and only those ids come back to the host.
Status Step(const llm::Decoder& d, std::span<llm::Sequence* const> seqs,
            std::vector<int32_t>& tokens) {
  FZ_ASSIGN_OR_RETURN(Tensor logits, d.DecodeStep(seqs, tokens));
  const std::vector<engine::ops::RowSampling> rows(tokens.size());  // greedy
  return engine::ops::SampleTokens(logits, rows, tokens);
}

bool Ok(const Status& s, const char* what) { return SectionStepOk(s, "end-to-end", what); }

// What one counted step handed the device (engine/core/step_counters.h): launches, host waits
// and copies (the sampler's read-back of the ids included), and step plans.
void AddStepCountRows(const std::string& tag, const engine::StepCounts& c,
                      std::vector<E2eRow>& rows) {
  rows.push_back({tag + " kernel launches per step", static_cast<double>(c.launches), "count"});
  rows.push_back(
      {tag + " host synchronisations per step", static_cast<double>(c.host_syncs), "count"});
  rows.push_back({tag + " host-device copies per step", static_cast<double>(c.copies()), "count"});
  rows.push_back({tag + " step plans per step", static_cast<double>(c.plan_uploads), "count"});
}

// LLaVA-OneVision's tower: SigLIP-so400m-patch14-384 with OV's 26 layers (docs/models.md §1.1).
engine::model::VisionConfig SiglipSo400m() {
  engine::model::VisionConfig c;
  c.arch = engine::model::VisionArch::kSiglip;
  c.hidden_size = 1152;
  c.intermediate_size = 4304;
  c.num_hidden_layers = 26;
  c.num_attention_heads = 16;
  c.head_dim = 72;
  c.image_size = 384;
  c.patch_size = 14;
  c.hidden_act = engine::model::Activation::kGeluTanh;
  return c;
}

StatusOr<engine::vision::VisionTowerWeights> RandomTower(const engine::model::VisionConfig& c) {
  engine::vision::VisionTowerWeights w;
  uint64_t seed = 1000;
  const DType bf16 = DType::kBF16;
  const int64_t D = c.hidden_size, I = c.intermediate_size, K = 3 * c.patch_size * c.patch_size;
  FZ_ASSIGN_OR_RETURN(w.patch_weight, llm::RandomTensor({D, K}, bf16, seed++, 0.02f));
  FZ_ASSIGN_OR_RETURN(w.patch_bias, llm::RandomTensor({D}, bf16, seed++, 0.02f));
  FZ_ASSIGN_OR_RETURN(w.position_embedding,
                      llm::RandomTensor({c.num_positions(), D}, bf16, seed++, 0.02f));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    engine::vision::EncoderLayerWeights e;
    FZ_ASSIGN_OR_RETURN(e.ln1_weight, llm::RandomTensor({D}, bf16, seed++, 0.02f, 1.f));
    FZ_ASSIGN_OR_RETURN(e.ln1_bias, llm::RandomTensor({D}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(e.ln2_weight, llm::RandomTensor({D}, bf16, seed++, 0.02f, 1.f));
    FZ_ASSIGN_OR_RETURN(e.ln2_bias, llm::RandomTensor({D}, bf16, seed++, 0.02f));
    for (Tensor* t : {&e.q_weight, &e.k_weight, &e.v_weight, &e.out_weight}) {
      FZ_ASSIGN_OR_RETURN(*t, llm::RandomTensor({D, D}, bf16, seed++, 0.02f));
    }
    for (Tensor* t : {&e.q_bias, &e.k_bias, &e.v_bias, &e.out_bias, &e.fc2_bias}) {
      FZ_ASSIGN_OR_RETURN(*t, llm::RandomTensor({D}, bf16, seed++, 0.02f));
    }
    FZ_ASSIGN_OR_RETURN(e.fc1_weight, llm::RandomTensor({I, D}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(e.fc1_bias, llm::RandomTensor({I}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(e.fc2_weight, llm::RandomTensor({D, I}, bf16, seed++, 0.02f));
    w.layers.push_back(std::move(e));
  }
  return w;
}

}  // namespace

std::vector<E2eRow> VisionEndToEnd(bool quick) {
  const engine::model::VisionConfig config = SiglipSo400m();
  auto host = RandomTower(config);
  if (!Ok(host.status(), "random vision weights")) return {};
  auto tower = engine::vision::VisionTowerWeightsOn(*host, engine::Device::Cuda(0));
  if (!Ok(tower.status(), "vision weights to the GPU")) return {};
  // Video frames as the server sends them: preprocessed pixels on the host, 8 per batch (the
  // default VisionRunOptions), the last hidden state back on the host.
  const int64_t frames = quick ? 8 : 32;
  auto pixels =
      llm::RandomTensor({frames, 3, config.image_size, config.image_size}, DType::kF32, 7, 0.5f);
  if (!Ok(pixels.status(), "pixels")) return {};
  const std::vector<int64_t> last = {config.num_hidden_layers};
  Status st;
  auto run = [&](int64_t n) {
    auto batch = pixels->Slice(0, n);
    if (!batch.ok()) {
      st = batch.status();
      return;
    }
    st = engine::vision::VisionTowerHiddenStates(config, *tower, *batch, last).status();
  };
  run(8);  // warm-up: cuBLAS handles, allocator segments, module loading
  if (!Ok(st, "vision warm-up")) return {};
  // The median of 3, as the torch peer. The timed region includes the host's patch unfold and
  // the upload, as in the server (pixels arrive on the host); torch's conv runs on the GPU.
  std::vector<double> runs;
  for (int i = 0; i < 3 && st.ok(); ++i) runs.push_back(Seconds([&] { run(frames); }));
  if (!Ok(st, "vision tower")) return {};
  std::sort(runs.begin(), runs.end());
  return {{"end-to-end vision tower, SigLIP-so400m (OV) bf16, 384 px, " + std::to_string(frames) +
               " frames in batches of 8",
           static_cast<double>(frames) / runs[1], "frames/s"}};
}

// A prompt's token embeddings on the decoder's device, fed through Prefill.
static Status PrefillIds(const llm::Decoder& d, llm::Sequence& seq,
                         const std::vector<int32_t>& ids) {
  FZ_ASSIGN_OR_RETURN(const Tensor embeds, d.Embed(ids));
  return d.Prefill(seq, embeds).status();
}

std::vector<E2eRow> ModelEndToEnd(double copy_gbps, bool quick) {
  const llm::DecoderShape shape = llm::Qwen2_0_5BShape();
  auto host = llm::MakeRandomDecoderWeights(
      shape, {.dtype = DType::kBF16, .seed = 1, .stddev = 0.02f, .tied_lm_head = true});
  if (!Ok(host.status(), "random weights")) return {};
  // The serving decoder, whole on the GPU: weights copied there at Create, the KV cache in f32
  // pages of one pool on the device (taken in chunks from the caching allocator, capped at 8 GiB:
  // every cache below many times over, and the card left to the vision row).
  auto dec = llm::Decoder::Create(shape, host->weights, engine::Device::Cuda(0));
  if (!Ok(dec.status(), "weights to the GPU")) return {};
  const llm::Decoder& d = **dec;
  const engine::kv::KvFormat format = engine::kv::KvFormat::kF32;
  auto pools = engine::kv::KvPools::Create(d.KvLayout(format, 16), {&format, 1}, int64_t{8} << 30,
                                           engine::Device::Cuda(0));
  if (!Ok(pools.status(), "KV pool")) return {};
  auto new_sequence = [&] { return d.NewSequence(**pools, format, "none"); };

  const int64_t prompt = quick ? 1024 : 4096;
  const int steps = quick ? 8 : 32;
  std::vector<E2eRow> rows;

  // Warm-up: cuBLAS handles, the caching allocator's segments, module loading.
  {
    auto warm = new_sequence();
    if (!Ok(warm.status(), "warm-up sequence")) return {};
    if (!Ok(PrefillIds(d, **warm, Ids(256, shape.vocab, 9)), "warm-up prefill")) return {};
  }

  auto seq = new_sequence();
  if (!Ok(seq.status(), "sequence")) return {};
  Status st;
  const double prefill_s = Seconds([&] { st = PrefillIds(d, **seq, Ids(prompt, shape.vocab, 1)); });
  if (!Ok(st, "prefill")) return {};
  rows.push_back(
      {"end-to-end prefill, Qwen2-0.5B shape bf16, " + std::to_string(prompt) + "-token prompt",
       static_cast<double>(prompt) / prefill_s, "tokens/s"});

  // Batch 1 after the long prompt: one token per step, picked on the device.
  {
    llm::Sequence* one[] = {seq->get()};
    std::vector<int32_t> token = {42};
    if (!Ok(Step(d, one, token), "decode warm-up")) return {};
    const double s = Seconds([&] {
      for (int i = 0; i < steps && st.ok(); ++i) st = Step(d, one, token);
    });
    if (!Ok(st, "decode batch 1")) return {};
    const double per_step = s / steps;
    rows.push_back({"end-to-end decode batch 1 at " + std::to_string(prompt) + " context",
                    1.0 / per_step, "tokens/s"});
    const double gbps = static_cast<double>(d.weight_bytes()) / per_step * 1e-9;
    rows.push_back({"end-to-end decode batch 1 weight bytes read", gbps, "GB/s"});
    if (copy_gbps > 0) {
      rows.push_back(
          {"end-to-end decode batch 1 fraction of copy ceiling", gbps / copy_gbps, "fraction"});
    }
  }

  // Batches of 16 and 64: that many sequences of `prompt` tokens each (the context the torch peers
  // decode at), one token each per step. The batch-16 step is also counted.
  for (const int batch : {16, 64}) {
    std::vector<std::unique_ptr<llm::Sequence>> seqs;
    std::vector<llm::Sequence*> ptrs;
    for (int b = 0; b < batch; ++b) {
      auto c = new_sequence();
      if (!Ok(c.status(), "batch sequence")) return rows;
      if (!Ok(PrefillIds(d, **c, Ids(prompt, shape.vocab, 100 + b)), "batch prefill")) {
        return rows;
      }
      ptrs.push_back(c->get());
      seqs.push_back(std::move(*c));
    }
    const std::string tag = "end-to-end decode batch " + std::to_string(batch);
    std::vector<int32_t> tokens(static_cast<size_t>(batch), 42);
    if (!Ok(Step(d, ptrs, tokens), "batch decode warm-up")) return rows;
    if (batch == 16) {
      // What one step hands the device (engine/core/step_counters.h): launches, host waits and
      // copies, the sampler's read-back of the ids included.
      const engine::StepCountScope scope;
      if (!Ok(Step(d, ptrs, tokens), "counted batch decode step")) return rows;
      AddStepCountRows(tag, scope.Elapsed(), rows);
    }
    const double s = Seconds([&] {
      for (int i = 0; i < steps && st.ok(); ++i) st = Step(d, ptrs, tokens);
    });
    if (!Ok(st, "batch decode")) return rows;
    rows.push_back({tag + " at " + std::to_string(prompt) + " context (aggregate)",
                    static_cast<double>(batch) * steps / s, "tokens/s"});
  }

  // Last, so that a failure here costs no other row: AttentionPack at batch 1 over the same prompt,
  // most of it visual rows stored as low-rank blocks: the engine's decode path for a block-holding
  // layer (the pages' share in the batch's paged attention, the fused block kernel, the merge on
  // the device) against the dense batch-1 row above; its step counted too (the blocks' token
  // probabilities of every layer come to the host in one copy once the layers are done, so the
  // step should wait for the device twice: there and for the sampled id).
  {
    auto pack = d.NewSequence(**pools, format, "attentionpack");
    if (!Ok(pack.status(), "attentionpack sequence")) return rows;
    const int64_t text = 64;  // a system prompt before the frames, a question after them
    std::vector<uint8_t> visual(static_cast<size_t>(prompt), 0);
    std::fill(visual.begin() + text, visual.end() - text, uint8_t{1});
    auto embeds = d.Embed(Ids(prompt, shape.vocab, 1));
    if (!Ok(embeds.status(), "attentionpack embeddings")) return rows;
    if (!Ok(d.Prefill(**pack, *embeds, {.visual = visual}).status(), "attentionpack prefill")) {
      return rows;
    }
    llm::Sequence* one[] = {pack->get()};
    std::vector<int32_t> token = {42};
    if (!Ok(Step(d, one, token), "attentionpack decode warm-up")) return rows;
    const std::string tag = "end-to-end decode batch 1, attentionpack (" +
                            std::to_string(prompt - 2 * text) + " visual tokens in blocks), at " +
                            std::to_string(prompt) + " context";
    {
      const engine::StepCountScope scope;
      if (!Ok(Step(d, one, token), "counted attentionpack step")) return rows;
      AddStepCountRows(tag, scope.Elapsed(), rows);
    }
    const double s = Seconds([&] {
      for (int i = 0; i < steps && st.ok(); ++i) st = Step(d, one, token);
    });
    if (!Ok(st, "attentionpack decode")) return rows;
    rows.push_back({tag, steps / s, "tokens/s"});
  }
  return rows;
}

bool SectionStepOk(const Status& s, const char* section, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "framezip bench gpu: %s %s failed: %s\n", section, what,
               std::string(s.message()).c_str());
  return false;
}

}  // namespace framezip::benchgpu
