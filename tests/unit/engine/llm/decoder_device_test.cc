// The serving decoder (llm::Decoder) on every device present
// (tests/unit/engine/ops/device_cases.h), its weights, activations and KV pages there, on a model
// of framezip-tiny-video's text shape (hidden 128, 4 layers, 4/2 heads of 32 — or of 64 as in
// Qwen2-0.5B —, intermediate 384, vocabulary 448, q/k/v biases, tied head) with fresh random f32 or
// bf16 weights: prefill, prefill continued on the cache, and batched decode of two sequences, for
// KV pages in f32 and f16 (policy none) and for KIVI's int4 pages (policy kivi).
//
// The reference is the f64 forward pass of decoder_reference.h, which rounds cached K/V to f16
// where the pages are f16 and attends as the decoder's KV backend does (a prefill chunk's own rows
// unrounded, a decode token through its page). Every device's logits are checked against it.
// Where pages round each device's own f32 K/V (f16 pages, KIVI's int4 codes), a value within
// rounding of a boundary lands on the neighbouring f16 value or code on one side and not the
// other, and no reference can know which: there a GPU is compared, as before device cases, with
// the CPU's logits, which this case itself checks against the f64 pass; KIVI's int4/int2
// attention is also checked against f64 over the dequantised tokens in
// tests/unit/engine/kv/mixed_decode_attention_test.cc.
//
// Tolerances on the logits, relative to their RMS (a wrong position, mask or cache row gives
// errors of the order of the RMS itself; uncorrelated logits are sqrt(2) apart in relative L2):
//   CPU, f32 pages: f32 GEMMs (ScopedF32Gemm, so bf16 weights are read exactly, as the reference
//                 reads them) and f32 activations; only rounding and the f32 RoPE angles differ:
//                 1e-4 per element, 3e-5 in relative L2 (measured at most 1.2e-5 and 2.7e-6 over
//                 12 seeds).
//   CPU, f16 pages: the same, plus the parted f16 roundings of K/V above (each one f16 step,
//                 2^-11 relative, carried on by the decode steps): 3e-3 per element, 1e-3 in
//                 relative L2 (measured at most 8.3e-4 and 2.0e-4 over 12 seeds).
//   CPU, kivi:    against the f64 pass with unquantised K/V (f16-rounded for f16 pages): int4 keys
//                 and values (a step of 1/15 of a group's range) outside the residual window move
//                 the logits by a quarter of their RMS: 2.5 per element, 0.5 in relative L2
//                 (measured at most 1.2 and 0.264 over 12 seeds).
//   GPU, f32 weights: full-f32 GEMMs (no TF32), only summation orders differ: 1e-3 per element,
//                 3e-4 in relative L2 (against the f64 pass for f32 pages; against the CPU for
//                 f16 pages, which round both sides' K/V alike).
//   GPU, bf16 weights: every GEMM on the GPU rounds its f32 input to bf16
//                 (tests/unit/engine/ops/linear_test.cc: ~1e-3 of the output's RMS per GEMM),
//                 compounded over 4 layers of 7 GEMMs and the head, and prefill chunks of 64
//                 rows or more attend on bf16 tensor cores (attention_cuda_test.cc: ~5e-3 of the
//                 attention output's RMS): 1e-1 per element, 3e-2 in relative L2.
//   GPU, kivi (against the CPU's KIVI logits): the quantisers are bit-identical, but inputs a
//                 rounding apart can land in neighbouring codes, a whole code step apart (1/15 of
//                 a group's range at int4), and the decode steps carry that on: 16× the GPU bounds
//                 above plus a term for the flips themselves, 5e-2 per element and 1e-2 in
//                 relative L2. On an H200, seed 716638903 reached relative L2 5.2e-3 after six
//                 decode steps at 2 bits, and 1.6e-2 of the RMS in one element at 4 bits (step
//                 38); a wrong page, position or format is off by O(1). KIVI runs at 4 bits here,
//                 where flips are 5× smaller; int2 pages are compared on identical codes
//                 (tests/unit/engine/paged_attention_cuda_test.cc), the quantiser's codes bit for
//                 bit (tests/unit/engine/kv/quant_page_test.cc), and 2-bit KIVI end to end by
//                 gpu-check's GPU eval.
#include <array>
#include <catch2/catch.hpp>
#include <optional>
#include <random>
#include <string>

#include "engine/kv/kv_pools.h"
#include "engine/llm/decoder.h"
#include "engine/ops/gemm_amx.h"
#include "engine/synthetic/random_decoder_weights.h"
#include "tests/testing/random.h"
#include "tests/testing/tiny_decoder.h"
#include "tests/unit/engine/llm/decoder_reference.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::llm {
namespace {

using reference::ReferenceDecoder;
using test::RmsTolerance;

constexpr int kDecodeSteps = 40;

struct TinyText {
  DecoderShape shape;
  RandomDecoderWeights random;  // owns the tensors
  const DecoderWeights& weights() const { return random.weights; }
};

TinyText MakeTinyText(DType dtype, int64_t head_dim, uint64_t seed) {
  TinyText m;
  m.shape = testing::ShippedTextShape(head_dim);
  const DecoderShape& s = m.shape;
  // Tied head, as the shipped model; fresh values every run (the test seed).
  m.random = *MakeRandomDecoderWeights(
      s, {.dtype = dtype, .seed = seed, .stddev = 0.09f, .tied_lm_head = true});
  return m;
}

// The scenario's tokens: sequence A prefilled in two pieces (the second attends to the first
// through the cache), B at once, then both decoded together (past KIVI's window of 32 tokens).
struct Tokens {
  std::vector<int32_t> a, b;
  std::vector<std::array<int32_t, 2>> steps;
  static constexpr size_t kFirstPiece = 100;
};

Tokens DrawTokens(int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  Tokens t;
  t.a.resize(173);
  t.b.resize(29);
  for (auto& id : t.a) id = pick(rng);
  for (auto& id : t.b) id = pick(rng);
  for (int step = 0; step < kDecodeSteps; ++step) t.steps.push_back({pick(rng), pick(rng)});
  return t;
}

// The logits of one run of the scenario, on the host: the last row of A's second piece and of B,
// then [2, V] per decode step.
struct ScenarioLogits {
  Tensor prefill_a, prefill_b;
  std::vector<Tensor> steps;
  kv::KvBytesByFormat bytes_a, bytes_b;  // the pages each sequence holds at the end
};

Tensor ToHost(const StatusOr<Tensor>& t) {
  INFO((t.ok() ? "" : MessageOf(t.status())));
  REQUIRE(t.ok());
  auto host = t->To(Device::Cpu());
  REQUIRE(host.ok());
  return *std::move(host);
}

// The scenario on `device`: the decoder, its weights and its KV pools (pages of 16 tokens, so
// prefill chunks and decode steps cross page boundaries) there.
ScenarioLogits RunOn(const Device& device, const TinyText& m, kv::KvFormat full,
                     const std::string& policy, const Tokens& tokens) {
  auto decoder = Decoder::Create(m.shape, m.weights(), device);
  INFO((decoder.ok() ? "" : MessageOf(decoder.status())));
  REQUIRE(decoder.ok());
  const Decoder& d = **decoder;
  if (device.is_cpu()) {
    CHECK(d.weight_bytes() == 0);  // host views, nothing copied
  } else {
    CHECK(d.weight_bytes() > 0);
  }
  const kv::KvFormat formats[] = {full, kv::KvFormat::kInt4, kv::KvFormat::kInt2};
  auto pools = kv::KvPools::Create(d.KvLayout(full, 16), formats, int64_t{256} << 20, device);
  REQUIRE(pools.ok());
  auto a = d.NewSequence(**pools, full, policy);
  auto b = d.NewSequence(**pools, full, policy);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK((*a)->kv.device() == device);
  const auto prefill = [&](Sequence& seq, std::span<const int32_t> ids) {
    auto embeds = d.Embed(ids);
    REQUIRE(embeds.ok());
    return ToHost(d.Prefill(seq, *embeds));
  };
  const std::span<const int32_t> a_ids(tokens.a);
  ScenarioLogits out;
  prefill(**a, a_ids.first(Tokens::kFirstPiece));
  out.prefill_a = prefill(**a, a_ids.subspan(Tokens::kFirstPiece));
  out.prefill_b = prefill(**b, tokens.b);
  for (const auto& step : tokens.steps) {
    Sequence* seqs[] = {a->get(), b->get()};
    out.steps.push_back(ToHost(d.DecodeStep(seqs, step)));
  }
  CHECK((*a)->length == 213);
  CHECK((*b)->length == 69);
  out.bytes_a = (*a)->kv.bytes_by_format();
  out.bytes_b = (*b)->kv.bytes_by_format();
  return out;
}

// The f64 logits of the scenario, in ScenarioLogits' rows.
struct ReferenceLogits {
  std::vector<double> prefill_a, prefill_b;
  std::vector<std::vector<double>> steps;
};

std::vector<double> LastRow(const std::vector<double>& rows, int64_t width) {
  return std::vector<double>(rows.end() - width, rows.end());
}

ReferenceLogits ReferenceOf(const TinyText& m, bool f16_kv, const Tokens& tokens) {
  const reference::ReferenceShape shape = reference::ReferenceShapeOf(m.shape);
  ReferenceDecoder a(shape, m.weights(), {.f16_kv = f16_kv});
  ReferenceDecoder b(shape, m.weights(), {.f16_kv = f16_kv});
  const std::span<const int32_t> a_ids(tokens.a);
  ReferenceLogits r;
  a.Prefill(a_ids.first(Tokens::kFirstPiece));
  r.prefill_a = LastRow(a.Prefill(a_ids.subspan(Tokens::kFirstPiece)), m.shape.vocab);
  r.prefill_b = LastRow(b.Prefill(tokens.b), m.shape.vocab);
  for (const auto& step : tokens.steps) {
    std::vector<double> rows = a.Decode(step[0]);
    const std::vector<double> row_b = b.Decode(step[1]);
    rows.insert(rows.end(), row_b.begin(), row_b.end());
    r.steps.push_back(std::move(rows));
  }
  return r;
}

void CheckAgainst(const ScenarioLogits& got, const ReferenceLogits& want, RmsTolerance tol) {
  {
    INFO("prefill of A's second piece");
    test::CheckWithinRmsOf(got.prefill_a, want.prefill_a, tol);
  }
  {
    INFO("prefill of B");
    test::CheckWithinRmsOf(got.prefill_b, want.prefill_b, tol);
  }
  REQUIRE(got.steps.size() == want.steps.size());
  for (size_t step = 0; step < got.steps.size(); ++step) {
    CAPTURE(step);
    test::CheckWithinRmsOf(got.steps[step], want.steps[step], tol);
  }
}

void CheckAgainst(const ScenarioLogits& got, const ScenarioLogits& want, RmsTolerance tol) {
  const auto values = [](const Tensor& t) {
    const std::vector<float> f = testing::ToFloatVector(t);
    return std::vector<double>(f.begin(), f.end());
  };
  ReferenceLogits as_reference{values(want.prefill_a), values(want.prefill_b), {}};
  for (const Tensor& step : want.steps) as_reference.steps.push_back(values(step));
  CheckAgainst(got, as_reference, tol);
}

// The GPU's bounds (the file comment says why).
RmsTolerance GpuTolerance(DType dtype, bool kivi) {
  const RmsTolerance tol =
      dtype == DType::kF32 ? RmsTolerance{1e-3, 3e-4} : RmsTolerance{1e-1, 3e-2};
  if (!kivi) return tol;
  return {tol.element * 16 + 5e-2, tol.l2 * 16 + 1e-2};
}

TEST_CASE("The serving decoder on every device matches the f64 forward pass",
          "[unit][engine][llm][devices]") {
  ops::cpu::ScopedF32Gemm f32_gemm;  // the CPU's f32 GEMMs (AMX would round inputs to bf16)
  const DType dtype = GENERATE(DType::kF32, DType::kBF16);
  // 32: the shipped model's heads; 64: Qwen2-0.5B's. Decode runs the GPU's split-K paged kernel
  // on CUDA cores for both.
  const int64_t head_dim = GENERATE(32, 64);
  const kv::KvFormat full = GENERATE(kv::KvFormat::kF32, kv::KvFormat::kF16);
  // KIVI (4-bit: see the file comment) with a residual window of 32, so the 40 decode steps
  // requantise it on the device.
  const std::string policy = GENERATE(std::string("none"), std::string("kivi:window=32,bits=4"));
  const bool kivi = policy != "none";
  CAPTURE(DTypeName(dtype), head_dim, kv::KvFormatName(full), policy);
  std::mt19937_64 rng(testing::TestSeed());
  const TinyText m = MakeTinyText(dtype, head_dim, rng());
  const Tokens tokens = DrawTokens(m.shape.vocab, rng);
  const ReferenceLogits f64 = ReferenceOf(m, full == kv::KvFormat::kF16, tokens);

  // Pages that round each device's own f32 K/V (see the file comment).
  const bool own_rounding = kivi || full == kv::KvFormat::kF16;
  RmsTolerance cpu_tol =
      full == kv::KvFormat::kF16 ? RmsTolerance{3e-3, 1e-3} : RmsTolerance{1e-4, 3e-5};
  if (kivi) cpu_tol = RmsTolerance{2.5, 0.5};
  std::optional<ScenarioLogits> cpu;  // the CPU runs first (DevicesPresent)
  test::ForEachDevice([&](const Device& device) {
    const ScenarioLogits got = RunOn(device, m, full, policy, tokens);
    if (device.is_cpu()) {
      CheckAgainst(got, f64, cpu_tol);
      cpu = got;
      return;
    }
    REQUIRE(cpu.has_value());
    if (own_rounding) {
      CheckAgainst(got, *cpu, GpuTolerance(dtype, kivi));
    } else {
      CheckAgainst(got, f64, GpuTolerance(dtype, kivi));
    }
    // The same pages in the same formats on every device.
    CHECK(got.bytes_a == cpu->bytes_a);
    CHECK(got.bytes_b == cpu->bytes_b);
  });
}

}  // namespace
}  // namespace framezip::engine::llm
