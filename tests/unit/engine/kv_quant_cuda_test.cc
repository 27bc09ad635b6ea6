// [cuda]: KIVI page quantisation on the GPU against the CPU quantiser (ops/kv_quant.h, laid out
// as engine/kv/quant_page.cc does), on fresh random K/V with outlier channels: every code byte
// and every zeroed tail byte must be identical; the f16 scales and zeros are expected to be
// identical too (same f64/f32/f16 rounding steps) and must be within one f16 step.
#include "engine/ops/kv_quant_cuda.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/ops/kv_quant.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {
namespace {

namespace kvq = ops::kvq;

// Offsets of quant_page.cc's layout for C channels, P slots, b bits.
struct PageOffsets {
  size_t k_scale, k_zero, v_codes, v_scale, v_zero, bytes;
};
PageOffsets OffsetsOf(int64_t c, int64_t p, int bits) {
  const size_t rows = static_cast<size_t>(p) * kvq::CodeRowBytes(c, bits);
  const size_t vp = static_cast<size_t>(p * (c / 32)) * 2;
  PageOffsets o;
  o.k_scale = rows;
  o.k_zero = o.k_scale + c * 2;
  o.v_codes = o.k_zero + c * 2;
  o.v_scale = o.v_codes + rows;
  o.v_zero = o.v_scale + vp;
  o.bytes = o.v_zero + vp;
  return o;
}

TEST_CASE("KV page quantisation on the GPU matches the CPU quantiser", "[cuda][ops]") {
  if (SkipWithoutGpu()) return;
  std::mt19937_64 rng(testing::TestSeed());
  const int bits = GENERATE(4, 2);
  struct Shape3 {
    int64_t n, groups, d, page;
  };
  const Shape3 shape = GENERATE(Shape3{100, 2, 64, 32}, Shape3{32, 2, 128, 32},
                                Shape3{7, 4, 64, 16}, Shape3{257, 1, 128, 64});
  DYNAMIC_SECTION(bits << "-bit, n=" << shape.n << " G=" << shape.groups << " d=" << shape.d
                       << " P=" << shape.page) {
    const int64_t c = shape.groups * shape.d, n = shape.n, page = shape.page;
    auto k = MakeRandom({n, shape.groups, shape.d}, DType::kF32, rng);
    auto v = MakeRandom({n, shape.groups, shape.d}, DType::kF32, rng);
    // Key outlier channels (KIVI's reason for per-channel keys) and a wide value row.
    for (int64_t t = 0; t < n; ++t) {
      k.tensor.data<float>()[t * c + 3] *= 20.f;
      k.tensor.data<float>()[t * c + c - 1] += 7.f;
    }
    v.tensor.data<float>()[0] *= 50.f;

    const PageOffsets o = OffsetsOf(c, page, bits);
    const int64_t pages = (n + page - 1) / page;
    const size_t stride = (o.bytes + 255) / 256 * 256;
    std::vector<uint8_t> want(stride * pages, 0), got(stride * pages, 0xAB);
    for (int64_t i = 0; i < pages; ++i) {
      const int64_t t0 = i * page, nt = std::min(page, n - t0);
      uint8_t* base = want.data() + i * stride;
      kvq::QuantizeKeys(k.tensor.data<float>() + t0 * c, nt, c, bits, base,
                        reinterpret_cast<Float16*>(base + o.k_scale),
                        reinterpret_cast<Float16*>(base + o.k_zero));
      kvq::QuantizeValues(v.tensor.data<float>() + t0 * c, nt, c, bits, base + o.v_codes,
                          reinterpret_cast<Float16*>(base + o.v_scale),
                          reinterpret_cast<Float16*>(base + o.v_zero), page);
    }
    // Poisoned device pages: every byte the kernel must write (zero tails too) is checked.
    Tensor dev = OnGpu([&] {
      Tensor t = MakeEmpty({static_cast<int64_t>(got.size())}, DType::kU8);
      std::memcpy(t.raw_data(), got.data(), got.size());
      return t;
    }());
    std::vector<void*> page_ptrs;
    for (int64_t i = 0; i < pages; ++i)
      page_ptrs.push_back(static_cast<char*>(dev.raw_data()) + i * stride);
    const auto st =
        ops::QuantizeKvPagesCuda(OnGpu(k.tensor), OnGpu(v.tensor), page, bits, page_ptrs);
    INFO(st.ToString());
    REQUIRE(st.ok());
    REQUIRE(CopyBytes(got.data(), Device::Cpu(), dev.raw_data(), Device::Cuda(0), got.size()).ok());

    int64_t code_mismatch = 0, param_exact_mismatch = 0, param_far = 0;
    for (int64_t i = 0; i < pages; ++i) {
      const uint8_t* w = want.data() + i * stride;
      const uint8_t* g = got.data() + i * stride;
      auto is_param = [&](size_t b) { return (b >= o.k_scale && b < o.v_codes) || b >= o.v_scale; };
      for (size_t b = 0; b < o.bytes; ++b) {
        if (!is_param(b) && w[b] != g[b]) ++code_mismatch;
      }
      for (size_t b = o.k_scale; b < o.bytes; b += 2) {
        if (!is_param(b)) continue;
        uint16_t hw, hg;
        std::memcpy(&hw, w + b, 2);
        std::memcpy(&hg, g + b, 2);
        if (hw != hg) {
          ++param_exact_mismatch;
          // One f16 step apart (same sign): adjacent bit patterns.
          if ((hw ^ hg) & 0x8000u || (hw > hg ? hw - hg : hg - hw) > 1) ++param_far;
        }
      }
    }
    INFO("parameters differing in the last f16 bit: " << param_exact_mismatch);
    CHECK(code_mismatch == 0);
    CHECK(param_far == 0);
    CHECK(param_exact_mismatch == 0);
  }
}

}  // namespace
}  // namespace framezip::engine::test
