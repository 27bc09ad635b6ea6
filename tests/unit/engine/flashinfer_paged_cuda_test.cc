// [cuda]: FlashInfer's batch prefill over framezip's dense f16 pages (flashinfer_paged.cuh),
// against an f64 reference on fresh random pages: a pool whose pages are handed out in shuffled
// order, sequences of one page, many pages and a partly filled last page, GQA 14/2 at head size 64
// and 28/4 at 128 (Qwen2-0.5B's and Qwen2-7B's layouts), decode (one row per sequence) and
// chunked prefill (several rows per sequence, the rows last among the keys, causal).
// Tolerance: q, K and V are f16 already (the reference reads the same values); the kernel rounds
// P to f16 before P·V (relative 2^-11) and writes an f16 output (another 2^-11), with f32
// accumulation, so outputs of magnitude ~1 are off by ~1e-3 at most: abs 3e-3 + rel 4e-3.
// Not device cases: the kernel exists only on the GPU, over a page layout the CPU op does not
// take (the op on every device: tests/unit/engine/ops/paged_attention_test.cc).
// In a build without FlashInfer the planner must refuse with cudaErrorNotSupported.
#include <cuda_runtime.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/core/half.h"
#include "engine/kernels/cuda/flashinfer_paged.cuh"
#include "tests/unit/engine/cuda_test_util.h"

namespace framezip::engine::test {
namespace {

using cuda::FlashInferPagedPlan;
using cuda::FlashInferPagedRun;
using cuda::FlashInferWorkspace;

struct SequenceShape {
  int rows;    // query rows (1 in decode)
  int tokens;  // keys, the rows' own included
};

struct Layout {
  int heads;
  int kv_heads;
  int head_dim;
  int page_tokens;
};

// Device memory released at scope end, whatever REQUIRE stops the test.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { REQUIRE(cudaMalloc(&ptr, bytes) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct PinnedBuffer {
  void* ptr = nullptr;
  explicit PinnedBuffer(size_t bytes) { REQUIRE(cudaMallocHost(&ptr, bytes) == cudaSuccess); }
  ~PinnedBuffer() { cudaFreeHost(ptr); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

template <typename T>
void Upload(const DeviceBuffer& dst, const std::vector<T>& src) {
  REQUIRE(cudaMemcpy(dst.ptr, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice) ==
          cudaSuccess);
}

Float16 RandomHalf(std::mt19937& rng, float bound) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  return F32ToF16(dist(rng));
}

void CheckAgainstReference(const Layout& l, const std::vector<SequenceShape>& seqs, uint32_t seed) {
  const int batch = static_cast<int>(seqs.size());
  const int d = l.head_dim;
  const int group = l.heads / l.kv_heads;
  const int64_t token_elems = int64_t{l.kv_heads} * d;
  const int64_t page_stride = int64_t{l.page_tokens} * token_elems;
  std::mt19937 rng(seed);

  // The page table: every sequence's pages drawn from one shuffled pool with spare pages, so
  // neither the order nor the contiguity of pages is what makes the result right.
  std::vector<int32_t> qo_indptr{0}, page_indptr{0}, last_page_len;
  int total_pages = 0;
  for (const SequenceShape& s : seqs) {
    const int pages = (s.tokens + l.page_tokens - 1) / l.page_tokens;
    total_pages += pages;
    qo_indptr.push_back(qo_indptr.back() + s.rows);
    page_indptr.push_back(page_indptr.back() + pages);
    last_page_len.push_back(s.tokens - (pages - 1) * l.page_tokens);
  }
  const int pool_pages = total_pages + 5;
  std::vector<int32_t> pool(pool_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  const std::vector<int32_t> page_indices(pool.begin(), pool.begin() + total_pages);

  std::vector<Float16> keys(static_cast<size_t>(pool_pages * page_stride));
  std::vector<Float16> values(keys.size());
  for (auto& k : keys) k = RandomHalf(rng, 1.0f);
  for (auto& v : values) v = RandomHalf(rng, 1.0f);
  const int rows = qo_indptr.back();
  std::vector<Float16> q(static_cast<size_t>(rows) * l.heads * d);
  for (auto& x : q) x = RandomHalf(rng, 1.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  FlashInferWorkspace ws;
  DeviceBuffer float_ws(cuda::kFlashInferFloatWorkspaceBytes);
  DeviceBuffer int_ws(cuda::kFlashInferIntWorkspaceBytes);
  PinnedBuffer pinned_ws(cuda::kFlashInferIntWorkspaceBytes);
  ws.float_buffer = float_ws.ptr;
  ws.int_buffer = int_ws.ptr;
  ws.pinned_int_buffer = pinned_ws.ptr;
  ws.float_bytes = cuda::kFlashInferFloatWorkspaceBytes;
  ws.int_bytes = cuda::kFlashInferIntWorkspaceBytes;

  FlashInferPagedPlan plan;
  std::string error;
  const cudaError_t planned =
      cuda::PlanFlashInferPaged(ws, qo_indptr.data(), page_indptr.data(), batch, l.heads,
                                l.kv_heads, d, l.page_tokens, /*stream=*/nullptr, &plan, &error);
  INFO(error);
  REQUIRE(planned == cudaSuccess);

  DeviceBuffer d_keys(keys.size() * 2), d_values(values.size() * 2), d_q(q.size() * 2),
      d_out(q.size() * 2), d_qo(qo_indptr.size() * 4), d_pages(page_indptr.size() * 4),
      d_indices(page_indices.size() * 4), d_last(last_page_len.size() * 4);
  Upload(d_keys, keys);
  Upload(d_values, values);
  Upload(d_q, q);
  Upload(d_qo, qo_indptr);
  Upload(d_pages, page_indptr);
  Upload(d_indices, page_indices);
  Upload(d_last, last_page_len);
  // f16 NaN everywhere, so a row the kernel never writes fails.
  REQUIRE(cudaMemset(d_out.ptr, 0xff, q.size() * 2) == cudaSuccess);

  FlashInferPagedRun run;
  run.q = d_q.ptr;
  run.out = d_out.ptr;
  run.keys = d_keys.ptr;
  run.values = d_values.ptr;
  run.page_stride = page_stride;
  run.qo_indptr = static_cast<const int32_t*>(d_qo.ptr);
  run.page_indptr = static_cast<const int32_t*>(d_pages.ptr);
  run.page_indices = static_cast<const int32_t*>(d_indices.ptr);
  run.last_page_len = static_cast<const int32_t*>(d_last.ptr);
  run.scale = scale;
  const cudaError_t launched = cuda::LaunchFlashInferPaged(run, plan, ws, nullptr, &error);
  INFO(error);
  REQUIRE(launched == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<Float16> out(q.size());
  REQUIRE(cudaMemcpy(out.data(), d_out.ptr, out.size() * 2, cudaMemcpyDeviceToHost) == cudaSuccess);

  // The reference in f64 from the same f16 values: token t of sequence b lies on page
  // page_indices[page_indptr[b] + t / page_tokens], row t % page_tokens.
  auto at = [&](const std::vector<Float16>& pages, int b, int t, int kv_head, int i) {
    const int32_t page = page_indices[page_indptr[b] + t / l.page_tokens];
    const int64_t offset =
        page * page_stride + int64_t{t % l.page_tokens} * token_elems + int64_t{kv_head} * d + i;
    return static_cast<double>(F16ToF32(pages[offset]));
  };
  std::vector<float> got, want;
  for (int b = 0; b < batch; ++b) {
    const SequenceShape& s = seqs[b];
    for (int r = 0; r < s.rows; ++r) {
      const int row = qo_indptr[b] + r;
      const int visible = s.tokens - s.rows + r + 1;  // bottom-right causal
      for (int h = 0; h < l.heads; ++h) {
        const int kv_head = h / group;
        const Float16* qh = &q[(static_cast<size_t>(row) * l.heads + h) * d];
        std::vector<double> score(visible);
        double top = -INFINITY;
        for (int t = 0; t < visible; ++t) {
          double dot = 0;
          for (int i = 0; i < d; ++i) dot += F16ToF32(qh[i]) * at(keys, b, t, kv_head, i);
          score[t] = dot * scale;
          top = std::max(top, score[t]);
        }
        double sum = 0;
        for (double& p : score) sum += (p = std::exp(p - top));
        for (int i = 0; i < d; ++i) {
          double o = 0;
          for (int t = 0; t < visible; ++t) o += score[t] * at(values, b, t, kv_head, i);
          want.push_back(static_cast<float>(o / sum));
          got.push_back(F16ToF32(out[(static_cast<size_t>(row) * l.heads + h) * d + i]));
        }
      }
    }
  }
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 3e-3 + 4e-3 * std::fabs(want[i]))) ++bad;
  }
  INFO("elements off: " << bad << " of " << want.size()
                        << ", relative L2 error: " << RelativeL2(got, want));
  CHECK(bad == 0);
}

TEST_CASE("FlashInfer paged decode over shuffled f16 pages matches an f64 reference", "[cuda]") {
  if (SkipWithoutGpu()) return;
  if (!cuda::FlashInferPagedSupports(64)) {
    FlashInferWorkspace ws;
    FlashInferPagedPlan plan;
    const int32_t indptr[2] = {0, 1};
    std::string error;
    CHECK(cuda::PlanFlashInferPaged(ws, indptr, indptr, 1, 14, 2, 64, 16, nullptr, &plan, &error) ==
          cudaErrorNotSupported);
    return;
  }
  std::random_device seed;
  const uint32_t s = seed();
  INFO("seed " << s);
  SECTION("GQA 14/2 at head size 64") {
    CheckAgainstReference({14, 2, 64, 16}, {{1, 1}, {1, 37}, {1, 300}, {1, 16}}, s);
  }
  SECTION("GQA 28/4 at head size 128 and a long context") {
    CheckAgainstReference({28, 4, 128, 16}, {{1, 2049}, {1, 5}}, s);
  }
}

TEST_CASE("FlashInfer paged prefill chunks attend causally to their own rows and the past",
          "[cuda]") {
  if (SkipWithoutGpu()) return;
  if (!cuda::FlashInferPagedSupports(128)) return;  // the decode case checks the refusal
  std::random_device seed;
  const uint32_t s = seed();
  INFO("seed " << s);
  SECTION("GQA 14/2 at head size 64") {
    CheckAgainstReference({14, 2, 64, 16}, {{5, 5}, {17, 40}, {1, 9}, {64, 200}}, s);
  }
  SECTION("GQA 28/4 at head size 128") {
    CheckAgainstReference({28, 4, 128, 16}, {{33, 33}, {7, 130}}, s);
  }
}

}  // namespace
}  // namespace framezip::engine::test
