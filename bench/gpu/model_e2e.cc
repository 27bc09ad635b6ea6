#include "bench/gpu/model_e2e.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <thread>

#include "engine/core/half.h"
#include "engine/dense/dense_decoder.h"
#include "engine/ops/sample.h"
#include "engine/vision/vision_tower.h"

namespace framezip::benchgpu {
namespace {

using engine::DType;
using engine::Tensor;
namespace dense = engine::dense;

dense::DecoderShape Qwen2_0_5B() {
  dense::DecoderShape s;
  s.hidden = 896;
  s.layers = 24;
  s.heads = 14;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.intermediate = 4864;
  s.vocab = 151936;
  s.rms_eps = 1e-6f;
  s.rope.head_dim = 64;
  s.rope.theta = 1e6;
  return s;
}

// Host tensors of uniform values (std `stddev` around `mean`), filled on every core: 494 M
// parameters take a few seconds on one.
StatusOr<Tensor> Uniform(engine::Shape shape, DType dtype, uint64_t seed, float stddev,
                         float mean = 0.f) {
  FZ_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(std::move(shape), dtype));
  const int64_t n = t.numel();
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const float half_width = stddev * 1.7320508f;  // uniform on [-a, a] has std a / sqrt(3)
  auto fill = [&](int64_t begin, int64_t end, uint64_t state) {
    for (int64_t i = begin; i < end; ++i) {
      state += 0x9E3779B97F4A7C15ull;  // splitmix64
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const float u = static_cast<float>(z >> 40) * (1.f / 16777216.f);  // [0, 1)
      const float v = mean + (2.f * u - 1.f) * half_width;
      if (dtype == DType::kBF16) {
        t.data<engine::BFloat16>()[i] = engine::F32ToBF16(v);
      } else {
        t.data<float>()[i] = v;
      }
    }
  };
  std::vector<std::thread> pool;
  const int64_t per = (n + threads - 1) / threads;
  for (unsigned k = 0; k < threads; ++k) {
    const int64_t b = std::min<int64_t>(n, k * per), e = std::min<int64_t>(n, b + per);
    pool.emplace_back(fill, b, e, seed * 1000003 + k);
  }
  for (auto& th : pool) th.join();
  return t;
}

StatusOr<dense::DecoderTensors> RandomWeights(const dense::DecoderShape& s) {
  dense::DecoderTensors t;
  uint64_t seed = 1;
  const DType bf16 = DType::kBF16;
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  FZ_ASSIGN_OR_RETURN(t.embed, Uniform({s.vocab, s.hidden}, bf16, seed++, 0.02f));
  t.lm_head = t.embed;  // tied, as Qwen2-0.5B
  FZ_ASSIGN_OR_RETURN(t.norm, Uniform({s.hidden}, bf16, seed++, 0.02f, 1.f));
  for (int64_t l = 0; l < s.layers; ++l) {
    dense::LayerWeights w;
    FZ_ASSIGN_OR_RETURN(w.input_norm, Uniform({s.hidden}, bf16, seed++, 0.02f, 1.f));
    FZ_ASSIGN_OR_RETURN(w.post_norm, Uniform({s.hidden}, bf16, seed++, 0.02f, 1.f));
    FZ_ASSIGN_OR_RETURN(w.q, Uniform({q, s.hidden}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(w.q_bias, Uniform({q}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(w.k, Uniform({kv, s.hidden}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(w.k_bias, Uniform({kv}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(w.v, Uniform({kv, s.hidden}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(w.v_bias, Uniform({kv}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(w.o, Uniform({s.hidden, q}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(w.gate, Uniform({s.intermediate, s.hidden}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(w.up, Uniform({s.intermediate, s.hidden}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(w.down, Uniform({s.hidden, s.intermediate}, bf16, seed++, 0.02f));
    t.layers.push_back(std::move(w));
  }
  return t;
}

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
Status Step(const dense::DenseDecoder& d, std::span<dense::KvCache* const> caches,
            std::vector<int32_t>& tokens) {
  FZ_ASSIGN_OR_RETURN(Tensor logits, d.DecodeStep(caches, tokens));
  const std::vector<engine::ops::RowSampling> rows(tokens.size());  // greedy
  return engine::ops::SampleTokens(logits, rows, tokens);
}

bool Ok(const Status& s, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "framezip bench gpu: end-to-end %s failed: %s\n", what,
               std::string(s.message()).c_str());
  return false;
}

// LLaVA-OneVision's tower: SigLIP-so400m-patch14-384 as OV runs it (26 layers, MODELS.md §1).
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
  FZ_ASSIGN_OR_RETURN(w.patch_weight, Uniform({D, K}, bf16, seed++, 0.02f));
  FZ_ASSIGN_OR_RETURN(w.patch_bias, Uniform({D}, bf16, seed++, 0.02f));
  FZ_ASSIGN_OR_RETURN(w.position_embedding, Uniform({c.num_positions(), D}, bf16, seed++, 0.02f));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    engine::vision::EncoderLayerWeights e;
    FZ_ASSIGN_OR_RETURN(e.ln1_weight, Uniform({D}, bf16, seed++, 0.02f, 1.f));
    FZ_ASSIGN_OR_RETURN(e.ln1_bias, Uniform({D}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(e.ln2_weight, Uniform({D}, bf16, seed++, 0.02f, 1.f));
    FZ_ASSIGN_OR_RETURN(e.ln2_bias, Uniform({D}, bf16, seed++, 0.02f));
    for (Tensor* t : {&e.q_weight, &e.k_weight, &e.v_weight, &e.out_weight}) {
      FZ_ASSIGN_OR_RETURN(*t, Uniform({D, D}, bf16, seed++, 0.02f));
    }
    for (Tensor* t : {&e.q_bias, &e.k_bias, &e.v_bias, &e.out_bias, &e.fc2_bias}) {
      FZ_ASSIGN_OR_RETURN(*t, Uniform({D}, bf16, seed++, 0.02f));
    }
    FZ_ASSIGN_OR_RETURN(e.fc1_weight, Uniform({I, D}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(e.fc1_bias, Uniform({I}, bf16, seed++, 0.02f));
    FZ_ASSIGN_OR_RETURN(e.fc2_weight, Uniform({D, I}, bf16, seed++, 0.02f));
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
  auto pixels = Uniform({frames, 3, config.image_size, config.image_size}, DType::kF32, 7, 0.5f);
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

std::vector<E2eRow> ModelEndToEnd(double copy_gbps, bool quick) {
  const dense::DecoderShape shape = Qwen2_0_5B();
  auto host = RandomWeights(shape);
  if (!Ok(host.status(), "random weights")) return {};
  // The KV page pool is reserved at Create; 8 GiB holds every cache below (~10 k tokens of this
  // shape's 1 KiB per token and layer) many times over, and leaves the card to the vision row.
  auto dec = dense::DenseDecoder::Create(shape, *host, engine::Device::Cuda(0),
                                         {.max_bytes = int64_t{8} << 30});
  if (!Ok(dec.status(), "weights to the GPU")) return {};
  const dense::DenseDecoder& d = **dec;

  const int64_t prompt = quick ? 1024 : 4096, batch_context = quick ? 256 : 1024;
  const int steps = quick ? 8 : 32, batch = 16;
  std::vector<E2eRow> rows;

  // Warm-up: cuBLAS handles, the caching allocator's segments, module loading.
  {
    auto warm = d.NewCache(256 + 4);
    if (!Ok(warm.status(), "warm-up cache")) return {};
    if (!Ok(d.Prefill(**warm, Ids(256, shape.vocab, 9)).status(), "warm-up prefill")) return {};
  }

  auto cache = d.NewCache(prompt + steps + 4);
  if (!Ok(cache.status(), "cache")) return {};
  Status st;
  const double prefill_s =
      Seconds([&] { st = d.Prefill(**cache, Ids(prompt, shape.vocab, 1)).status(); });
  if (!Ok(st, "prefill")) return {};
  rows.push_back(
      {"end-to-end prefill, Qwen2-0.5B shape bf16, " + std::to_string(prompt) + "-token prompt",
       static_cast<double>(prompt) / prefill_s, "tokens/s"});

  // Batch 1 after the long prompt: one token per step, picked on the device.
  {
    dense::KvCache* one[] = {cache->get()};
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

  // Batch 16: sixteen sequences of batch_context tokens each, one token each per step.
  {
    std::vector<std::unique_ptr<dense::KvCache>> caches;
    std::vector<dense::KvCache*> ptrs;
    for (int b = 0; b < batch; ++b) {
      auto c = d.NewCache(batch_context + steps + 4);
      if (!Ok(c.status(), "batch cache")) return {};
      if (!Ok(d.Prefill(**c, Ids(batch_context, shape.vocab, 100 + b)).status(), "batch prefill")) {
        return {};
      }
      ptrs.push_back(c->get());
      caches.push_back(std::move(*c));
    }
    std::vector<int32_t> tokens(batch, 42);
    if (!Ok(Step(d, ptrs, tokens), "batch decode warm-up")) return {};
    const double s = Seconds([&] {
      for (int i = 0; i < steps && st.ok(); ++i) st = Step(d, ptrs, tokens);
    });
    if (!Ok(st, "decode batch 16")) return {};
    rows.push_back(
        {"end-to-end decode batch 16 at " + std::to_string(batch_context) + " context (aggregate)",
         batch * steps / s, "tokens/s"});
  }
  return rows;
}

}  // namespace framezip::benchgpu
