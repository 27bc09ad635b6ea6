// [cuda]: the GPU's split-K paged decode kernel variants, called through the launcher directly,
// against the CPU op: the CUDA-core kernel and the tensor-core kernel, with work items that start
// on span boundaries and inside spans (the op itself picks multiples of 32), on fresh random pages
// of every format and mixed page tables (ragged sequences, partly filled and empty spans, an empty
// sequence, GQA up to 16/1, head_dim 32, 64 and 128, a long sequence of many work items). The
// CUDA-core kernel computes in f32 from the same stored bytes as the CPU: abs 2e-5 + rel 1e-4;
// the tensor-core kernel's tolerance is derived below.
// Not device cases: the launcher, its work items and the tensor-core variant exist only on the
// GPU (the op picks them itself; called directly, the test reaches item sizes and the variant the
// op would not pick), and so does the 16-byte alignment the GPU's copies need, whose refusal is
// checked below. The op on every device against f64: tests/unit/engine/ops/paged_attention_test.cc.
// Also [unit] (runs without a GPU): the host-side work splitting covers every token exactly once.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/kernels/cuda/paged_attention.cuh"
#include "engine/ops/kv_quant.h"
#include "engine/ops/paged_attention.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"
#include "tests/unit/engine/ops/kv_span_arena.h"

namespace framezip::engine::test {
namespace {

constexpr testing::Tolerance kDecode{2e-5, 1e-4};

// The tensor-core kernel (PagedDecodeLaunch::tensor_cores) through the launcher directly: f16
// operands: q ⊙ key scale, P and dequantised V rounded to 11 bits (relative 2^-11 ≈ 5e-4 each),
// so a single-token output (v itself) is off by up to |v|·5e-4; long sequences average that down.
// Two or three tokens do not: each score carries the rounding of q ⊙ scale and of the key
// (~4e-4 in log2 units), and an output near 0 then gets ~2-3e-4 from the score errors alone
// plus the P and V roundings. A numpy emulation of the kernel's roundings over 2000 seeds put the
// "f32 d128" case (a 3-token sequence) at up to 1.26e-3 absolute, so the floor is 2e-3.
constexpr testing::Tolerance kDecodeMma{2e-3, 4e-3};

// The launcher called directly, with work items of `tokens_per_item` tokens (the op picks a
// multiple of 32; other sizes make items start inside a span, on quantised pages too).
Tensor RunKernelDirect(const Tensor& q_host, const std::vector<ops::KvSpan>& gpu_spans,
                       const std::vector<int32_t>& offsets, int kv_heads, int32_t tokens_per_item,
                       bool tensor_cores) {
  const int64_t batch = q_host.dim(0), heads = q_host.dim(1), d = q_host.dim(2);
  std::vector<cuda::PagedSpanDesc> descs;
  std::vector<int32_t> tokens;
  for (const ops::KvSpan& s : gpu_spans) {
    cuda::PagedSpanDesc e;
    e.k = s.k;
    e.v = s.v;
    e.k_scale = s.k_scale;
    e.k_zero = s.k_zero;
    e.v_scale = s.v_scale;
    e.v_zero = s.v_zero;
    e.num_tokens = s.num_tokens;
    e.v_param_stride = s.v_param_stride;
    e.format = static_cast<int32_t>(s.format);
    descs.push_back(e);
    tokens.push_back(s.num_tokens);
  }
  std::vector<cuda::PagedWorkItem> items;
  std::vector<int32_t> item_offsets;
  cuda::BuildPagedWorkItems(tokens.data(), offsets.data(), static_cast<int>(batch), tokens_per_item,
                            items, item_offsets);
  auto upload = [](const void* data, size_t bytes) {
    Tensor t = MakeEmpty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, DType::kU8);
    if (bytes > 0) std::memcpy(t.raw_data(), data, bytes);
    return OnGpu(t);
  };
  const Tensor ddesc = upload(descs.data(), descs.size() * sizeof(descs[0]));
  const Tensor ditems = upload(items.data(), items.size() * sizeof(cuda::PagedWorkItem));
  const Tensor doffs = upload(item_offsets.data(), item_offsets.size() * sizeof(int32_t));
  const Tensor ws = OnGpu(MakeEmpty({static_cast<int64_t>(std::max<size_t>(
      1, cuda::PagedDecodeWorkspaceFloats(static_cast<int32_t>(items.size()),
                                          static_cast<int>(heads), static_cast<int>(d))))}));
  const Tensor q = OnGpu(q_host);
  Tensor out = PoisonedGpu({batch, heads, d});
  cuda::PagedDecodeLaunch p;
  p.q = static_cast<const float*>(q.raw_data());
  p.out = static_cast<float*>(out.raw_data());
  p.spans = static_cast<const cuda::PagedSpanDesc*>(ddesc.raw_data());
  p.items = static_cast<const cuda::PagedWorkItem*>(ditems.raw_data());
  p.item_offsets = static_cast<const int32_t*>(doffs.raw_data());
  p.num_items = static_cast<int32_t>(items.size());
  p.workspace = static_cast<float*>(ws.raw_data());
  p.batch = static_cast<int>(batch);
  p.heads = static_cast<int>(heads);
  p.kv_heads = kv_heads;
  p.head_dim = static_cast<int>(d);
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.tensor_cores = tensor_cores;
  const cudaError_t launched = cuda::LaunchPagedDecodeAttention(p, nullptr);
  if (tensor_cores && d == 32) {
    // The tensor-core kernel is built for 64 and 128: the launcher refuses, nothing runs.
    CHECK(launched == cudaErrorInvalidValue);
    return out;
  }
  REQUIRE(launched == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return out;
}

TEST_CASE("Paged decode kernel variants on the GPU match the CPU op", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  for (const PagedCase& c : PagedDecodeCases()) {
    DYNAMIC_SECTION(c.name) {
      SpanArena arena;
      const std::vector<int32_t> offsets = FillArena(c, arena, rng);
      const int64_t batch = static_cast<int64_t>(c.seq_spans.size());
      const auto q = MakeRandom({batch, c.heads, c.d}, DType::kF32, rng);
      Tensor want = MakeEmpty({batch, c.heads, c.d});
      const std::vector<ops::KvSpan> cpu_spans = arena.Spans(Device::Cpu());
      REQUIRE(
          ops::PagedDecodeAttention(
              q.tensor,
              ops::PagedKv{cpu_spans, offsets, static_cast<int>(c.kv_heads), static_cast<int>(c.d)},
              want)
              .ok());
      const auto gpu_spans = arena.Spans(Device::Cuda(0));
      const int kv_heads = static_cast<int>(c.kv_heads);
      // 96: items that start on span boundaries; 40: items that start inside spans.
      for (const int32_t tokens_per_item : {96, 40}) {
        INFO("CUDA-core kernel, " << tokens_per_item << " tokens per work item");
        CheckClose(RunKernelDirect(q.tensor, gpu_spans, offsets, kv_heads, tokens_per_item, false),
                   want, kDecode);
        INFO("tensor-core kernel, " << tokens_per_item << " tokens per work item");
        const Tensor mma =
            RunKernelDirect(q.tensor, gpu_spans, offsets, kv_heads, tokens_per_item, true);
        if (c.d != 32) CheckClose(mma, want, kDecodeMma);  // at 32 it checked the refusal
      }
    }
  }
}

// The kernels copy K/V rows and a quantised span's key scale/zero with 16-byte cp.async: the op
// refuses pointers off that alignment (naming the span) before anything is launched.
TEST_CASE("Paged decode on the GPU refuses spans the kernels cannot copy", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const PagedCase c{"int4 4/2 d64", 4, 2, 64, {{32, 16}}, {kv::KvFormat::kInt4}};
  SpanArena arena;
  const std::vector<int32_t> offsets = FillArena(c, arena, rng);
  const auto q = OnGpu(MakeRandom({1, c.heads, c.d}, DType::kF32, rng).tensor);
  Tensor out = OnGpu(MakeEmpty({1, c.heads, c.d}));
  for (const char* field : {"k", "v", "k_scale", "k_zero"}) {
    CAPTURE(field);
    std::vector<ops::KvSpan> spans = arena.Spans(Device::Cuda(0));
    ops::KvSpan& s = spans[1];  // int4, 16 tokens
    const std::string_view f(field);
    const auto off_by_2 = [](const Float16* p) {
      return reinterpret_cast<const Float16*>(reinterpret_cast<const char*>(p) + 2);
    };
    if (f == "k") s.k = static_cast<const char*>(s.k) + 2;
    if (f == "v") s.v = static_cast<const char*>(s.v) + 2;
    if (f == "k_scale") s.k_scale = off_by_2(s.k_scale);
    if (f == "k_zero") s.k_zero = off_by_2(s.k_zero);
    const Status st = ops::PagedDecodeAttention(
        q, ops::PagedKv{spans, offsets, static_cast<int>(c.kv_heads), static_cast<int>(c.d)}, out);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(st.message()),
               Catch::Contains("span 1") && Catch::Contains("16-byte aligned"));
  }
}

TEST_CASE("Paged decode work items cover every token once, in order", "[unit][ops]") {
  std::mt19937_64 rng(testing::TestSeed());
  std::uniform_int_distribution<int32_t> len(0, 40), count(0, 9);
  for (int trial = 0; trial < 50; ++trial) {
    const int batch = 1 + trial % 5;
    std::vector<int32_t> tokens, offsets = {0};
    for (int b = 0; b < batch; ++b) {
      const int spans = count(rng);
      for (int s = 0; s < spans; ++s) tokens.push_back(len(rng));
      offsets.push_back(static_cast<int32_t>(tokens.size()));
    }
    const int32_t per_item = 1 + trial % 70;
    std::vector<cuda::PagedWorkItem> items;
    std::vector<int32_t> item_offsets;
    cuda::BuildPagedWorkItems(tokens.data(), offsets.data(), batch, per_item, items, item_offsets);
    REQUIRE(item_offsets.size() == static_cast<size_t>(batch) + 1);
    REQUIRE(item_offsets.back() == static_cast<int32_t>(items.size()));
    for (int b = 0; b < batch; ++b) {
      // Walk the sequence's items as the kernel does and check they tile its tokens exactly.
      int32_t span = offsets[b], tok = 0;
      for (int32_t i = item_offsets[b]; i < item_offsets[b + 1]; ++i) {
        const cuda::PagedWorkItem& it = items[i];
        REQUIRE(it.seq == b);
        REQUIRE(it.num_tokens >= 1);
        REQUIRE(it.num_tokens <= per_item);
        while (span < offsets[b + 1] && tok >= tokens[span]) {
          ++span;
          tok = 0;
        }
        REQUIRE(it.span == span);
        REQUIRE(it.token == tok);
        int32_t left = it.num_tokens;
        while (left > 0) {
          REQUIRE(span < offsets[b + 1]);
          const int32_t take = std::min(left, tokens[span] - tok);
          left -= take;
          tok += take;
          if (tok == tokens[span]) {
            ++span;
            tok = 0;
          }
        }
      }
      while (span < offsets[b + 1] && tokens[span] == 0) ++span;
      REQUIRE(span == offsets[b + 1]);  // nothing left over
    }
  }
  CHECK(cuda::ChoosePagedTokensPerItem(32768, 2, 14, 132) % 32 == 0);
  CHECK(cuda::ChoosePagedTokensPerItem(10, 2, 14, 132) == 64);
}

}  // namespace
}  // namespace framezip::engine::test
