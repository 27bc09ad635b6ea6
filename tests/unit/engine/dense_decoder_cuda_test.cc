// [cuda]: the whole decoder on the GPU (dense::DenseDecoder with every tensor on the device, its
// KV cache in pages of a pool preallocated on the GPU)
// against the same class on the CPU — which dense_decoder_test.cc checks against llm::Decoder —
// on a model of framezip-tiny-video's text shape (hidden 128, 4 layers, 4/2 heads of 32 — or of
// 64 as in Qwen2-0.5B —, intermediate 384, vocabulary 448, q/k/v biases, tied head) with fresh
// random f32 or bf16 weights: prefill, prefill continued on the cache, and batched decode of two
// sequences.
//
// Tolerances on the logits, relative to their RMS (a wrong position, mask or cache row gives
// errors of the order of the RMS itself):
//   f32 weights:  full-f32 GEMMs (no TF32), only summation orders differ: 1e-3 per element,
//                 3e-4 in relative L2.
//   bf16 weights: every GEMM on the GPU rounds its f32 input to bf16 (linear_cuda_test.cc: ~1e-3
//                 of the output's RMS per GEMM), compounded over 4 layers of 7 GEMMs and the
//                 head, and prefill chunks of 64 rows or more attend on bf16 tensor cores
//                 (attention_cuda_test.cc: ~5e-3 of the attention output's RMS): 1e-1 per
//                 element, 3e-2 in relative L2.
#include <catch2/catch.hpp>
#include <random>

#include "engine/dense/dense_decoder.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

struct TinyText {
  dense::DecoderShape shape;
  dense::DecoderTensors tensors;
};

TinyText MakeTinyText(DType dtype, int64_t head_dim, std::mt19937_64& rng) {
  TinyText m;
  dense::DecoderShape& s = m.shape;
  s.hidden = 128;
  s.layers = 4;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = head_dim;
  s.intermediate = 384;
  s.vocab = 448;
  s.rms_eps = 1e-6f;
  s.rope.head_dim = static_cast<int>(head_dim);
  s.rope.theta = 1e4;
  auto norm = [&] {
    RandomTensor t = MakeRandom({s.hidden}, DType::kF32, rng, 0.1f);
    for (int64_t i = 0; i < s.hidden; ++i) t.tensor.data<float>()[i] += 1.f;
    return t.tensor;
  };
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  m.tensors.embed = MakeRandom({s.vocab, s.hidden}, dtype, rng, 0.5f).tensor;
  m.tensors.lm_head = m.tensors.embed;  // tied, as the shipped model
  m.tensors.norm = norm();
  for (int64_t l = 0; l < s.layers; ++l) {
    dense::LayerWeights w;
    w.input_norm = norm();
    w.post_norm = norm();
    w.q = MakeRandom({q, s.hidden}, dtype, rng, 0.09f).tensor;
    w.q_bias = MakeRandom({q}, dtype, rng, 0.1f).tensor;
    w.k = MakeRandom({kv, s.hidden}, dtype, rng, 0.09f).tensor;
    w.k_bias = MakeRandom({kv}, dtype, rng, 0.1f).tensor;
    w.v = MakeRandom({kv, s.hidden}, dtype, rng, 0.09f).tensor;
    w.v_bias = MakeRandom({kv}, dtype, rng, 0.1f).tensor;
    w.o = MakeRandom({s.hidden, q}, dtype, rng, 0.09f).tensor;
    w.gate = MakeRandom({s.intermediate, s.hidden}, dtype, rng, 0.09f).tensor;
    w.up = MakeRandom({s.intermediate, s.hidden}, dtype, rng, 0.09f).tensor;
    w.down = MakeRandom({s.hidden, s.intermediate}, dtype, rng, 0.05f).tensor;
    m.tensors.layers.push_back(std::move(w));
  }
  return m;
}

void CheckLogits(const Tensor& gpu, const Tensor& cpu, RmsTolerance tol) {
  REQUIRE(gpu.device() == Device::Cuda(0));
  REQUIRE(gpu.shape() == cpu.shape());
  CheckWithinRms(gpu, cpu, tol);
}

TEST_CASE("The whole decoder on the GPU matches the CPU (tiny-video text shape)", "[cuda][llm]") {
  if (SkipWithoutGpu()) return;
  const DType dtype = GENERATE(DType::kF32, DType::kBF16);
  // 32: the shipped model's heads (decode falls back to per-sequence attention on the GPU);
  // 64: Qwen2-0.5B's, where decode runs the split-K paged kernel.
  const int64_t head_dim = GENERATE(32, 64);
  CAPTURE(DTypeName(dtype), head_dim);
  const RmsTolerance tol =
      dtype == DType::kF32 ? RmsTolerance{1e-3, 3e-4} : RmsTolerance{1e-1, 3e-2};
  std::mt19937_64 rng(testing::TestSeed());
  const TinyText m = MakeTinyText(dtype, head_dim, rng);
  // Pages of 16 tokens, so prefill chunks and decode steps cross page boundaries; the GPU pool is
  // reserved at Create, capped here so the test does not take the card.
  const dense::KvPoolOptions pool{.page_tokens = 16, .max_bytes = int64_t{256} << 20};
  auto cpu = dense::DenseDecoder::Create(m.shape, m.tensors, Device::Cpu(), pool);
  auto gpu = dense::DenseDecoder::Create(m.shape, m.tensors, Device::Cuda(0), pool);
  INFO((gpu.ok() ? "" : MessageOf(gpu.status())));
  REQUIRE(cpu.ok());
  REQUIRE(gpu.ok());
  CHECK((*gpu)->weight_bytes() == (*cpu)->weight_bytes());
  // The GPU's page pool is reserved whole at Create.
  const kv::PagePool& gpu_pool = (*gpu)->kv_pool();
  CHECK(gpu_pool.device() == Device::Cuda(0));
  CHECK(gpu_pool.bytes_reserved() ==
        static_cast<size_t>(gpu_pool.max_pages()) * gpu_pool.layout().PageBytes());

  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(m.shape.vocab - 1));
  std::vector<int32_t> a(173), b(29);
  for (auto& id : a) id = pick(rng);
  for (auto& id : b) id = pick(rng);
  auto cpu_a = *(*cpu)->NewCache(256), cpu_b = *(*cpu)->NewCache(64);
  auto gpu_a = *(*gpu)->NewCache(256), gpu_b = *(*gpu)->NewCache(64);

  // A in two pieces (the second attends to the first through the cache), B at once.
  const std::span<const int32_t> a0(a.data(), 100), a1(a.data() + 100, a.size() - 100);
  REQUIRE((*cpu)->Prefill(*cpu_a, a0).ok());
  REQUIRE((*gpu)->Prefill(*gpu_a, a0).ok());
  auto want_a = (*cpu)->Prefill(*cpu_a, a1);
  auto got_a = (*gpu)->Prefill(*gpu_a, a1);
  auto want_b = (*cpu)->Prefill(*cpu_b, b);
  auto got_b = (*gpu)->Prefill(*gpu_b, b);
  REQUIRE(got_a.ok());
  REQUIRE(got_b.ok());
  CheckLogits(*got_a, *want_a, tol);
  CheckLogits(*got_b, *want_b, tol);

  // Batched decode, both sides fed the same tokens.
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    const int32_t tokens[] = {pick(rng), pick(rng)};
    dense::KvCache* cpu_caches[] = {cpu_a.get(), cpu_b.get()};
    dense::KvCache* gpu_caches[] = {gpu_a.get(), gpu_b.get()};
    auto want = (*cpu)->DecodeStep(cpu_caches, tokens);
    auto got = (*gpu)->DecodeStep(gpu_caches, tokens);
    INFO((got.ok() ? "" : MessageOf(got.status())));
    REQUIRE(got.ok());
    CheckLogits(*got, *want, tol);
  }
  CHECK(gpu_a->length() == 179);
  CHECK(gpu_b->length() == 35);
}

}  // namespace
}  // namespace framezip::engine::test
