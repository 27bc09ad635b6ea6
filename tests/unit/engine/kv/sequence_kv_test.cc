// SequenceKv over KvPools: Append by token class into per-format pages, Gather (dequantising),
// page images of every format, the residual-window recompression and the shared byte budget.
#include "engine/kv/sequence_kv.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "engine/kv/kv_pools.h"
#include "tests/testing/random.h"

namespace framezip::engine::kv {
namespace {

constexpr int kG = 2, kD = 64, kPage = 32;
constexpr int64_t kRow = kG * kD;

PageLayout Base() { return PageLayout{kPage, kG, kD, KvFormat::kF16}; }

std::unique_ptr<KvPools> AllPools(int64_t max_bytes = int64_t{64} << 20) {
  const auto formats = StorableFormats();
  return *KvPools::Create(Base(), formats, max_bytes);
}

struct Tokens {
  std::vector<float> k, v;
  std::vector<int32_t> pos;
};

Tokens MakeTokens(int64_t n, int32_t first_pos, std::mt19937_64& rng) {
  Tokens t{testing::RandomNormal(static_cast<size_t>(n * kRow), rng),
           testing::RandomNormal(static_cast<size_t>(n * kRow), rng),
           std::vector<int32_t>(static_cast<size_t>(n))};
  for (int64_t i = 0; i < n; ++i) t.pos[i] = first_pos + static_cast<int32_t>(i);
  return t;
}

// Token rows by position, from Gather + positions().
std::map<int32_t, std::pair<std::vector<float>, std::vector<float>>> ByPosition(const SequenceKv& s,
                                                                                int layer) {
  const int64_t n = s.num_tokens(layer);
  std::vector<float> k(static_cast<size_t>(n * kRow)), v(k.size());
  REQUIRE(s.Gather(layer, k.data(), v.data()).ok());
  const auto pos = s.positions(layer);
  REQUIRE(static_cast<int64_t>(pos.size()) == n);
  std::map<int32_t, std::pair<std::vector<float>, std::vector<float>>> out;
  for (int64_t i = 0; i < n; ++i) {
    out[pos[i]] = {std::vector<float>(k.begin() + i * kRow, k.begin() + (i + 1) * kRow),
                   std::vector<float>(v.begin() + i * kRow, v.begin() + (i + 1) * kRow)};
  }
  return out;
}

// Max |a - b| over a row.
double MaxErr(const std::vector<float>& a, const float* b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::fabs(double(a[i]) - b[i]));
  return e;
}

TEST_CASE("Append stores each token class in its format's pages", "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  auto pools = AllPools();
  auto seq =
      *SequenceKv::Create(*pools, 2, KvPrecision{KvFormat::kF16, KvFormat::kInt4, KvFormat::kInt2});
  const int64_t n = 150;
  const Tokens t = MakeTokens(n, 0, rng);
  std::vector<uint8_t> cls(n);
  std::uniform_int_distribution<int> pick(0, 3);
  for (auto& c : cls) c = static_cast<uint8_t>(pick(rng));
  // Two appends (as two prefill chunks would).
  REQUIRE(seq.Append(1, t.k.data(), t.v.data(), t.pos.data(), 70, cls.data()).ok());
  REQUIRE(seq.Append(1, t.k.data() + 70 * kRow, t.v.data() + 70 * kRow, t.pos.data() + 70, n - 70,
                     cls.data() + 70)
              .ok());
  std::map<uint8_t, int64_t> count;
  for (auto c : cls) ++count[c];
  CHECK(seq.num_tokens(0) == 0);
  CHECK(seq.num_tokens(1) == n - count[kDrop]);
  CHECK(seq.full_tokens(1) == count[kFull]);
  std::map<KvFormat, int64_t> tokens_by_format;
  for (const PageRef& p : seq.pages(1)) {
    REQUIRE(p.num_tokens > 0);
    tokens_by_format[p.format] += p.num_tokens;
  }
  CHECK(tokens_by_format[KvFormat::kF16] == count[kFull]);
  CHECK(tokens_by_format[KvFormat::kInt4] == count[kImportant]);
  CHECK(tokens_by_format[KvFormat::kInt2] == count[kRest]);
  // Every stored token comes back within its format's error; dropped ones are absent.
  const auto got = ByPosition(seq, 1);
  for (int64_t i = 0; i < n; ++i) {
    auto it = got.find(t.pos[i]);
    if (cls[i] == kDrop) {
      CHECK(it == got.end());
      continue;
    }
    REQUIRE(it != got.end());
    // N(0,1) rows: f16 ~1e-3; int4 range ~7 / 15 / 2; int2 range ~7 / 3 / 2 (+ margin).
    const double tol = cls[i] == kFull ? 4e-3 : cls[i] == kImportant ? 0.5 : 2.0;
    CHECK(MaxErr(it->second.first, t.k.data() + i * kRow) <= tol);
    CHECK(MaxErr(it->second.second, t.v.data() + i * kRow) <= tol);
  }
  // Bytes by format add up, and the quantised formats are the small ones.
  const auto by = seq.bytes_by_format();
  size_t total = 0;
  for (auto b : by) total += b;
  CHECK(total == seq.bytes());
  CHECK(total == pools->bytes_in_use());
  CHECK(pools->pool(KvFormat::kInt2)->layout().PageBytes() * 4 <
        pools->pool(KvFormat::kF16)->layout().PageBytes());
  seq.Clear();
  CHECK(pools->pages_in_use() == 0);
}

TEST_CASE("Page images of every format restore the same tokens", "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const KvFormat format = GENERATE(from_range(StorableFormats()));
  CAPTURE(KvFormatName(format));
  auto pools = AllPools();
  const KvFormat full = IsQuantized(format) ? KvFormat::kF16 : format;
  const KvPrecision precision{full, format, format};
  auto a = *SequenceKv::Create(*pools, 1, precision);
  auto b = *SequenceKv::Create(*pools, 1, precision);
  const Tokens t = MakeTokens(77, 5, rng);
  std::vector<uint8_t> cls(77, kImportant);
  REQUIRE(a.Append(0, t.k.data(), t.v.data(), t.pos.data(), 77, cls.data()).ok());
  REQUIRE(a.pages(0).size() == 3);
  for (size_t i = 0; i < a.pages(0).size(); ++i) {
    const PageImage img = a.page_image(0, i);
    CHECK(img.format == format);
    CHECK(img.bytes.size() == pools->pool(format)->layout().PageBytes());
    REQUIRE(b.AdoptPage(0, img).ok());
  }
  REQUIRE(b.num_tokens(0) == 77);
  CHECK(b.positions(0) == a.positions(0));
  std::vector<float> ka(77 * kRow), va(ka.size()), kb(ka.size()), vb(ka.size());
  REQUIRE(a.Gather(0, ka.data(), va.data()).ok());
  REQUIRE(b.Gather(0, kb.data(), vb.data()).ok());
  CHECK(ka == kb);
  CHECK(va == vb);
  for (size_t i = 0; i < a.pages(0).size(); ++i) {
    const auto ia = a.page_image(0, i).bytes, ib = b.page_image(0, i).bytes;
    CHECK(std::equal(ia.begin(), ia.end(), ib.begin(), ib.end()));
  }
  // A sequence without that format's pool refuses the page.
  auto only_f32 = *KvPools::Create(Base(), std::vector<KvFormat>{KvFormat::kF32}, 1 << 20);
  SequenceKv c(only_f32->pool(KvFormat::kF32), 1);
  if (format != KvFormat::kF32) {
    CHECK(c.AdoptPage(0, a.page_image(0, 0)).code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("CompressResidual requantises exactly the full-precision window", "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  auto pools = AllPools();
  auto seq =
      *SequenceKv::Create(*pools, 1, KvPrecision{KvFormat::kF16, KvFormat::kInt4, KvFormat::kInt2});
  const Tokens prompt = MakeTokens(40, 0, rng);
  std::vector<uint8_t> imp(40, kImportant);
  REQUIRE(seq.Append(0, prompt.k.data(), prompt.v.data(), prompt.pos.data(), 40, imp.data()).ok());
  const Tokens window = MakeTokens(45, 40, rng);
  for (int i = 0; i < 45; ++i) {
    REQUIRE(seq.Append(0, window.k.data() + i * kRow, window.v.data() + i * kRow,
                       window.pos.data() + i, 1)
                .ok());
  }
  REQUIRE(seq.full_tokens(0) == 45);
  CHECK(seq.residual_tokens(0) == 45);
  std::vector<float> wk(45 * kRow);
  REQUIRE(seq.GatherFull(0, wk.data(), nullptr).ok());
  CHECK(MaxErr(std::vector<float>(wk.begin(), wk.begin() + kRow), window.k.data()) < 4e-3);
  std::vector<uint8_t> cls(45, kRest);
  cls[0] = kDrop;
  cls[44] = kFull;
  CHECK(seq.CompressResidual(0, std::vector<uint8_t>(44, kRest)).code() ==
        absl::StatusCode::kInvalidArgument);
  REQUIRE(seq.CompressResidual(0, cls).ok());
  CHECK(seq.full_tokens(0) == 1);
  CHECK(seq.residual_tokens(0) == 0);  // the token kept kFull does not re-trigger the window
  CHECK(seq.num_tokens(0) == 40 + 44);
  int64_t int2 = 0;
  for (const PageRef& p : seq.pages(0)) int2 += p.format == KvFormat::kInt2 ? p.num_tokens : 0;
  CHECK(int2 == 43);
  const auto got = ByPosition(seq, 0);
  CHECK(got.count(40) == 0);  // dropped
  CHECK(MaxErr(got.at(84).first, window.k.data() + 44 * kRow) < 4e-3);
  CHECK(MaxErr(got.at(60).first, window.k.data() + 20 * kRow) < 2.0);
  CHECK(pools->pool(KvFormat::kF16)->pages_in_use() == 1);
}

TEST_CASE("A window the pools cannot requantise stays as it was, and is requantised once they can",
          "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const size_t f16_page = PageLayout{kPage, kG, kD, KvFormat::kF16}.PageBytes();
  auto pools = AllPools(static_cast<int64_t>(4 * f16_page));
  const KvPrecision kivi{KvFormat::kF16, KvFormat::kInt4, KvFormat::kInt2};
  auto seq = *SequenceKv::Create(*pools, 1, kivi);
  auto other = *SequenceKv::Create(*pools, 1, kivi);
  const Tokens window = MakeTokens(45, 0, rng);  // two f16 pages
  REQUIRE(seq.Append(0, window.k.data(), window.v.data(), window.pos.data(), 45).ok());
  const Tokens filler = MakeTokens(64, 0, rng);  // two more: the budget is used up
  REQUIRE(other.Append(0, filler.k.data(), filler.v.data(), filler.pos.data(), 64).ok());
  REQUIRE(pools->bytes_in_use() == 4 * f16_page);
  const std::vector<PageRef> pages_before = seq.pages(0);
  const auto rows_before = ByPosition(seq, 0);
  // Most of the window to int2 and int4 pages, its last token kept kFull in a page of its own:
  // new pages the budget cannot hold while the window's pages are still there.
  std::vector<uint8_t> cls(45, kRest);
  for (int i = 0; i < 10; ++i) cls[static_cast<size_t>(i)] = kImportant;
  cls[44] = kFull;
  REQUIRE(seq.CompressResidual(0, cls).ok());
  CHECK(seq.full_tokens(0) == 45);
  CHECK(seq.residual_tokens(0) == 45);
  REQUIRE(seq.pages(0).size() == pages_before.size());
  for (size_t i = 0; i < pages_before.size(); ++i) {
    CHECK(seq.pages(0)[i].id == pages_before[i].id);
    CHECK(seq.pages(0)[i].num_tokens == pages_before[i].num_tokens);
    CHECK(seq.pages(0)[i].format == pages_before[i].format);
  }
  CHECK(ByPosition(seq, 0) == rows_before);
  CHECK(pools->bytes_in_use() == 4 * f16_page);  // what the attempt took went back
  // The pages free up: the same window is requantised, all of it.
  other.Clear();
  REQUIRE(seq.CompressResidual(0, cls).ok());
  CHECK(seq.full_tokens(0) == 1);
  CHECK(seq.residual_tokens(0) == 0);
  CHECK(seq.num_tokens(0) == 45);
  const auto rows_after = ByPosition(seq, 0);
  CHECK(MaxErr(rows_after.at(44).first, window.k.data() + 44 * kRow) < 4e-3);
  CHECK(pools->pool(KvFormat::kF16)->pages_in_use() == 1);
}

TEST_CASE("KV pools share one byte budget", "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const size_t f16_page = PageLayout{kPage, kG, kD, KvFormat::kF16}.PageBytes();
  const size_t int2_page = PageLayout{kPage, kG, kD, KvFormat::kInt2}.PageBytes();
  auto pools = AllPools(static_cast<int64_t>(2 * f16_page + int2_page));
  auto seq =
      *SequenceKv::Create(*pools, 1, KvPrecision{KvFormat::kF16, KvFormat::kInt2, KvFormat::kInt2});
  const Tokens t = MakeTokens(96, 0, rng);
  REQUIRE(seq.Append(0, t.k.data(), t.v.data(), t.pos.data(), 64).ok());  // two f16 pages
  std::vector<uint8_t> imp(32, kImportant);
  REQUIRE(seq.Append(0, t.k.data() + 64 * kRow, t.v.data() + 64 * kRow, t.pos.data() + 64, 32,
                     imp.data())
              .ok());  // one int2 page: the budget is now exactly used
  CHECK(pools->bytes_in_use() == 2 * f16_page + int2_page);
  CHECK(seq.Append(0, t.k.data(), t.v.data(), t.pos.data(), 1, imp.data()).code() ==
        absl::StatusCode::kResourceExhausted);
  seq.Clear();
  CHECK(pools->bytes_in_use() == 0);
  REQUIRE(seq.Append(0, t.k.data(), t.v.data(), t.pos.data(), 1, imp.data()).ok());
}

TEST_CASE("A preallocated pool reserves every page at creation and never again",
          "[unit][engine][kv]") {
  const PageLayout layout{16, 2, 32, KvFormat::kF32};
  auto lazy = *PagePool::Create(layout, 100);
  CHECK(lazy->bytes_reserved() == 0);  // chunks come as pages are taken
  auto pool = *PagePool::Create(layout, 100, nullptr, PoolMemory{.preallocate = true});
  CHECK(pool->device().is_cpu());
  CHECK(pool->bytes_reserved() == 100 * layout.PageBytes());
  std::vector<PageId> ids;
  for (int i = 0; i < 100; ++i) ids.push_back(*pool->Allocate());
  CHECK(pool->bytes_reserved() == 100 * layout.PageBytes());
  CHECK(pool->Allocate().status().code() == absl::StatusCode::kResourceExhausted);
  // Pages are distinct, non-overlapping slices of the one reservation.
  std::vector<char*> keys;
  for (PageId id : ids) keys.push_back(static_cast<char*>(pool->Keys(id)));
  std::sort(keys.begin(), keys.end());
  for (size_t i = 1; i < keys.size(); ++i) {
    CHECK(static_cast<size_t>(keys[i] - keys[i - 1]) == layout.PageBytes());
  }
  // A pool on a device this build or machine cannot use is refused with the reason, at once.
  auto gpu = PagePool::Create(layout, 10, nullptr, PoolMemory{Device::Cuda(0), true});
  if (!gpu.ok()) {
    CHECK((gpu.status().code() == absl::StatusCode::kUnavailable ||
           gpu.status().code() == absl::StatusCode::kUnimplemented));
    CHECK_THAT(std::string(gpu.status().message()), Catch::Contains("KV page pool"));
  }
}

TEST_CASE("Quantised pools need head_dim % 32 == 0", "[unit][engine][kv]") {
  CHECK(PagePool::Create(PageLayout{32, 2, 16, KvFormat::kInt4}, 10).status().code() ==
        absl::StatusCode::kInvalidArgument);
  auto pools = *KvPools::Create(PageLayout{32, 2, 16, KvFormat::kF16},
                                std::vector<KvFormat>{KvFormat::kF16}, 1 << 20);
  CHECK(SequenceKv::Create(*pools, 1, KvPrecision{KvFormat::kF16, KvFormat::kInt2, KvFormat::kInt2})
            .status()
            .code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace framezip::engine::kv

namespace framezip::engine::kv {
namespace {

TEST_CASE("A step's pages are reserved all or nothing and appends take them from the reserve",
          "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const size_t f16_page = PageLayout{kPage, kG, kD, KvFormat::kF16}.PageBytes();
  auto pools = AllPools(static_cast<int64_t>(6 * f16_page));  // six f16 pages in all
  auto seq =
      *SequenceKv::Create(*pools, 3, KvPrecision{KvFormat::kF16, KvFormat::kF16, KvFormat::kF16});
  const Tokens t = MakeTokens(64, 0, rng);
  for (int l = 0; l < 3; ++l) REQUIRE(seq.Append(l, t.k.data(), t.v.data(), t.pos.data(), 5).ok());
  REQUIRE(seq.Append(0, t.k.data(), t.v.data(), t.pos.data() + 5, 27).ok());  // layer 0 full
  REQUIRE(pools->pages_in_use() == 3);

  // 27 tokens fit layers 1 and 2's free slots, but layer 0 needs a page.
  REQUIRE(seq.ReserveAppend(27, true).ok());
  CHECK(seq.reserved_pages() == 1);
  seq.ReleaseReserve();
  CHECK(pools->pages_in_use() == 3);
  // 28 need one page in every layer: exactly what is left.
  REQUIRE(seq.ReserveAppend(28, true).ok());
  CHECK(seq.reserved_pages() == 3);
  CHECK(pools->pages_in_use() == 6);
  CHECK(seq.num_pages() == 3);  // reserved pages hold no token
  for (int l = 0; l < 3; ++l) {
    REQUIRE(seq.Append(l, t.k.data(), t.v.data(), t.pos.data() + 32, 28).ok());
  }
  CHECK(seq.reserved_pages() == 0);
  CHECK(pools->pages_in_use() == 6);
  CHECK(seq.num_pages() == 6);

  // The pools are full. Layer 0's open page has 4 free slots, layers 1 and 2's 31: 5 tokens need
  // a page in layer 0 only, and the refusal takes nothing and names it.
  const Status full = seq.ReserveAppend(5, true);
  CHECK(full.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(MessageOf(full), Catch::Contains("layer 0"));
  CHECK(seq.reserved_pages() == 0);
  REQUIRE(seq.ReserveAppend(4, true).ok());
  CHECK(seq.reserved_pages() == 0);
  CHECK(seq.ReserveAppend(-1, true).code() == absl::StatusCode::kInvalidArgument);
  // A count no pool could hold is refused the same way, taking nothing.
  seq.Clear();
  CHECK(seq.ReserveAppend(std::numeric_limits<int64_t>::max(), true).code() ==
        absl::StatusCode::kResourceExhausted);
  CHECK(seq.reserved_pages() == 0);
  CHECK(pools->pages_in_use() == 0);
}

TEST_CASE("A reservation covers every format a step's token classes may use",
          "[unit][engine][kv]") {
  std::mt19937_64 rng(testing::TestSeed());
  const size_t f16_page = PageLayout{kPage, kG, kD, KvFormat::kF16}.PageBytes();
  const size_t int4_page = PageLayout{kPage, kG, kD, KvFormat::kInt4}.PageBytes();
  const size_t int2_page = PageLayout{kPage, kG, kD, KvFormat::kInt2}.PageBytes();
  // Two pages of each format for 40 tokens in one layer: the bound when every token may take any
  // class. One int2 page less and the reservation fails as a whole.
  for (const bool enough : {true, false}) {
    CAPTURE(enough);
    auto pools =
        AllPools(static_cast<int64_t>(2 * f16_page + 2 * int4_page + (enough ? 2 : 1) * int2_page));
    auto seq = *SequenceKv::Create(*pools, 1,
                                   KvPrecision{KvFormat::kF16, KvFormat::kInt4, KvFormat::kInt2});
    const Status st = seq.ReserveAppend(40, /*classified=*/true);
    if (!enough) {
      CHECK(st.code() == absl::StatusCode::kResourceExhausted);
      CHECK(pools->pages_in_use() == 0);
      // Tokens without classes (decode steps) are all kFull: only f16 pages are reserved.
      REQUIRE(seq.ReserveAppend(40, /*classified=*/false).ok());
      CHECK(seq.reserved_pages() == 2);
      CHECK(pools->pool(KvFormat::kF16)->pages_in_use() == 2);
      continue;
    }
    REQUIRE(st.ok());
    CHECK(seq.reserved_pages() == 6);
    // Any mix of classes now appends without touching the pools.
    const Tokens t = MakeTokens(40, 0, rng);
    std::vector<uint8_t> cls(40);
    std::uniform_int_distribution<int> pick(0, 3);
    for (auto& c : cls) c = static_cast<uint8_t>(pick(rng));
    REQUIRE(seq.Append(0, t.k.data(), t.v.data(), t.pos.data(), 40, cls.data()).ok());
    CHECK(pools->pages_in_use() == 6);
    seq.ReleaseReserve();
    CHECK(pools->pages_in_use() == seq.num_pages());
    seq.Clear();
    CHECK(pools->pages_in_use() == 0);
  }
}

}  // namespace
}  // namespace framezip::engine::kv

namespace framezip::engine::kv {
namespace {

// What a step's reservation costs a decode step: ReserveAppend + ReleaseReserve of one token on a
// 24-layer sequence (Qwen2-0.5B's depth), at a page boundary (a page per layer taken and, unused,
// given back) and inside a page (nothing to take). Run by hand:
//   build/tests/engine_kv_test "[bench]"
TEST_CASE("Step reservation timing on 24 layers", "[.][bench]") {
  auto pools = AllPools(int64_t{256} << 20);
  auto seq = *SequenceKv::Create(*pools, 24,
                                 KvPrecision{KvFormat::kF16, KvFormat::kInt4, KvFormat::kInt2});
  std::mt19937_64 rng(testing::TestSeed());
  const Tokens t = MakeTokens(kPage, 0, rng);
  for (const int64_t held : {int64_t{0}, int64_t{5}}) {
    seq.Clear();
    for (int l = 0; l < 24 && held > 0; ++l) {
      REQUIRE(seq.Append(l, t.k.data(), t.v.data(), t.pos.data(), held).ok());
    }
    for (const bool classified : {false, true}) {
      constexpr int kReps = 20000;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kReps; ++i) {
        REQUIRE(seq.ReserveAppend(1, classified).ok());
        seq.ReleaseReserve();
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          kReps;
      std::cout << (held == 0 ? "page boundary" : "inside a page") << ", "
                << (classified ? "every format" : "full format only") << ": " << us
                << " us per step" << std::endl;
    }
  }
}

}  // namespace
}  // namespace framezip::engine::kv
