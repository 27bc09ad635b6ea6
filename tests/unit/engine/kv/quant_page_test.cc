// KIVI page quantisation on every device present (tests/unit/engine/ops/device_cases.h): the
// CPU's page writer (quant_page.h, WriteQuantPage) and the GPU kernel (ops/kv_quant_cuda.h) write
// int4/int2 pages from fresh random K/V with outlier channels. Every code byte and every zeroed
// tail byte must equal the CPU quantiser's (ops/kv_quant.h) laid out as quant_page.h documents;
// the f16 scales and zeros are expected to be identical too (same f64/f32/f16 rounding steps) and
// must be within one f16 step.
//
// Why the reference is the CPU quantiser and not an f64 computation: pages are exchanged between
// devices and written to disk byte for byte, so the devices must agree bit for bit, not within a
// tolerance. The quantiser itself is checked against the input values (|x - x̂| <= scale/2 with a
// near-minimal scale) by "Quantise/dequantise round trip stays within scale/2" in
// kv_quant_test.cc.
#include "engine/kv/quant_page.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/ops/kv_quant.h"
#include "engine/ops/kv_quant_cuda.h"
#include "tests/unit/engine/ops/device_cases.h"

namespace framezip::engine::test {
namespace {

namespace kvq = ops::kvq;

// Offsets of quant_page.h's layout for C channels, P slots, b bits.
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

struct PageShape {
  int64_t n, groups, d, page;
};

// The device's page writer over `pages` (one device buffer, page i at i·stride): on the CPU
// WriteQuantPage per page, as kv/page_io.cc does; on a GPU the kernel, all pages at once.
Status QuantizePagesOn(const Device& device, const PageShape& s, int bits, const Tensor& k,
                       const Tensor& v, Tensor& pages, size_t stride) {
  const int64_t c = s.groups * s.d, count = (s.n + s.page - 1) / s.page;
  std::vector<void*> page_ptrs;
  for (int64_t i = 0; i < count; ++i) {
    page_ptrs.push_back(static_cast<char*>(pages.raw_data()) + i * stride);
  }
  if (!device.is_cpu()) return ops::QuantizeKvPagesCuda(k, v, s.page, bits, page_ptrs);
  const kv::PageLayout layout{.page_tokens = static_cast<int>(s.page),
                              .num_kv_heads = static_cast<int>(s.groups),
                              .head_dim = static_cast<int>(s.d),
                              .format = bits == 4 ? kv::KvFormat::kInt4 : kv::KvFormat::kInt2};
  FZ_RETURN_IF_ERROR(kv::CheckQuantPageLayout(layout));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t0 = i * s.page;
    kv::WriteQuantPage(layout, k.data<float>() + t0 * c, v.data<float>() + t0 * c,
                       std::min(s.page, s.n - t0), page_ptrs[static_cast<size_t>(i)]);
  }
  return absl::OkStatus();
}

TEST_CASE("KV page quantisation on every device writes the CPU quantiser's bytes",
          "[unit][engine][kv][devices]") {
  std::mt19937_64 rng(testing::TestSeed());
  const int bits = GENERATE(4, 2);
  const PageShape shape = GENERATE(PageShape{100, 2, 64, 32}, PageShape{32, 2, 128, 32},
                                   PageShape{7, 4, 64, 16}, PageShape{257, 1, 128, 64});
  DYNAMIC_SECTION(bits << "-bit n=" << shape.n << " G=" << shape.groups << " d=" << shape.d
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

    // The reference: the quantiser's arithmetic at the documented offsets, tails left zero.
    const PageOffsets o = OffsetsOf(c, page, bits);
    const int64_t pages = (n + page - 1) / page;
    const size_t stride = (o.bytes + 255) / 256 * 256;
    std::vector<uint8_t> want(stride * pages, 0);
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

    ForEachDevice([&](const Device& device) {
      // Poisoned pages: every byte the writer must write (zero tails too) is checked.
      std::vector<uint8_t> got(want.size(), 0xAB);
      Tensor dev = On(
          [&] {
            Tensor t = MakeEmpty({static_cast<int64_t>(got.size())}, DType::kU8);
            std::memcpy(t.raw_data(), got.data(), got.size());
            return t;
          }(),
          device);
      const Status st = QuantizePagesOn(device, shape, bits, On(k.tensor, device),
                                        On(v.tensor, device), dev, stride);
      INFO(st.ToString());
      REQUIRE(st.ok());
      REQUIRE(CopyBytes(got.data(), Device::Cpu(), dev.raw_data(), device, got.size()).ok());

      int64_t code_mismatch = 0, param_exact_mismatch = 0, param_far = 0;
      for (int64_t i = 0; i < pages; ++i) {
        const uint8_t* w = want.data() + i * stride;
        const uint8_t* g = got.data() + i * stride;
        auto is_param = [&](size_t b) {
          return (b >= o.k_scale && b < o.v_codes) || b >= o.v_scale;
        };
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
    });
  }
}

}  // namespace
}  // namespace framezip::engine::test
