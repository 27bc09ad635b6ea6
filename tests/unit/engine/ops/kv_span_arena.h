// KV spans for the paged decode attention tests: random K/V written in a page format (f32, f16, or
// KIVI int4/int2 by the CPU quantiser) into one host arena of 256-byte aligned pieces, mirrored
// byte for byte on any device, with the values each span holds once stored (the dequantised
// ones for int4/int2) for an f64 reference.
#pragma once

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/core/half.h"
#include "engine/core/tensor.h"
#include "engine/kv/kv_format.h"
#include "engine/ops/kv_quant.h"
#include "engine/ops/paged_kv.h"
#include "tests/testing/random.h"

namespace framezip::engine::test {

class SpanArena {
 public:
  // Appends a span of n tokens of random K/V [n, G, d] in `format` (a page of `page` slots).
  void Add(kv::KvFormat format, int32_t n, int32_t page, int64_t groups, int64_t d,
           std::mt19937_64& rng) {
    namespace kvq = ops::kvq;
    Piece piece;
    piece.format = format;
    piece.n = n;
    piece.page = page;
    const int64_t c = groups * d;
    const auto k = testing::RandomNormal(static_cast<size_t>(n * c), rng);
    const auto v = testing::RandomNormal(static_cast<size_t>(n * c), rng);
    std::vector<float> k_stored(k.size()), v_stored(v.size());
    switch (format) {
      case kv::KvFormat::kF32:
        piece.k = Put(k.data(), k.size() * 4);
        piece.v = Put(v.data(), v.size() * 4);
        k_stored = k;
        v_stored = v;
        break;
      case kv::KvFormat::kF16: {
        std::vector<Float16> kh(k.size()), vh(v.size());
        for (size_t i = 0; i < k.size(); ++i) {
          kh[i] = F32ToF16(k[i]);
          vh[i] = F32ToF16(v[i]);
          k_stored[i] = F16ToF32(kh[i]);
          v_stored[i] = F16ToF32(vh[i]);
        }
        piece.k = Put(kh.data(), kh.size() * 2);
        piece.v = Put(vh.data(), vh.size() * 2);
        break;
      }
      case kv::KvFormat::kInt4:
      case kv::KvFormat::kInt2: {
        const int bits = kv::KvFormatBits(format);
        const size_t row = kvq::CodeRowBytes(c, bits);
        std::vector<uint8_t> kc(row * page, 0), vc(row * page, 0);
        std::vector<Float16> ks(c), kz(c), vs(page * c / 32, Float16{0}),
            vz(page * c / 32, Float16{0});
        kvq::QuantizeKeys(k.data(), n, c, bits, kc.data(), ks.data(), kz.data());
        kvq::QuantizeValues(v.data(), n, c, bits, vc.data(), vs.data(), vz.data(), page);
        kvq::DequantizeKeys(kc.data(), ks.data(), kz.data(), n, c, bits, k_stored.data());
        kvq::DequantizeValues(vc.data(), vs.data(), vz.data(), n, c, bits, page, v_stored.data());
        piece.k = Put(kc.data(), kc.size());
        piece.v = Put(vc.data(), vc.size());
        piece.ks = Put(ks.data(), ks.size() * 2);
        piece.kz = Put(kz.data(), kz.size() * 2);
        piece.vs = Put(vs.data(), vs.size() * 2);
        piece.vz = Put(vz.data(), vz.size() * 2);
        break;
      }
      case kv::KvFormat::kLowRank:
        FAIL("not a decodable format");
    }
    piece.k_values.assign(k_stored.begin(), k_stored.end());
    piece.v_values.assign(v_stored.begin(), v_stored.end());
    pieces_.push_back(std::move(piece));
  }

  // The spans, pointing into this arena's copy on `device` (made at the first call per device;
  // call after the last Add).
  std::vector<ops::KvSpan> Spans(const Device& device) {
    const char* base = reinterpret_cast<const char*>(bytes_.data());
    if (!device.is_cpu()) {
      auto [it, added] = mirrors_.try_emplace(DeviceName(device));
      if (added) {
        auto t = Tensor::Empty({static_cast<int64_t>(bytes_.size())}, DType::kU8, device);
        FZ_CHECK(t.ok());
        it->second = *t;
        FZ_CHECK(
            CopyBytes(it->second.raw_data(), device, bytes_.data(), Device::Cpu(), bytes_.size())
                .ok());
      }
      base = static_cast<const char*>(it->second.raw_data());
    }
    auto at = [&](size_t off) { return off == kNone ? nullptr : base + off; };
    std::vector<ops::KvSpan> spans;
    for (const Piece& p : pieces_) {
      ops::KvSpan s;
      s.k = at(p.k);
      s.v = at(p.v);
      s.num_tokens = p.n;
      s.format = p.format;
      if (kv::IsQuantized(p.format)) {
        s.k_scale = reinterpret_cast<const Float16*>(at(p.ks));
        s.k_zero = reinterpret_cast<const Float16*>(at(p.kz));
        s.v_scale = reinterpret_cast<const Float16*>(at(p.vs));
        s.v_zero = reinterpret_cast<const Float16*>(at(p.vz));
        s.v_param_stride = p.page;
      }
      spans.push_back(s);
    }
    return spans;
  }

  // What span i holds once stored: [n, G, d] keys and values.
  const std::vector<double>& keys(size_t i) const { return pieces_[i].k_values; }
  const std::vector<double>& values(size_t i) const { return pieces_[i].v_values; }

 private:
  static constexpr size_t kNone = ~size_t{0};
  struct Piece {
    kv::KvFormat format = kv::KvFormat::kF16;
    int32_t n = 0, page = 0;
    size_t k = kNone, v = kNone, ks = kNone, kz = kNone, vs = kNone, vz = kNone;
    std::vector<double> k_values, v_values;
  };
  size_t Put(const void* data, size_t n) {
    const size_t off = (bytes_.size() + 255) / 256 * 256;
    bytes_.resize(off + std::max<size_t>(n, 1), 0);
    if (n > 0) std::memcpy(bytes_.data() + off, data, n);
    return off;
  }
  std::vector<uint8_t> bytes_;
  std::vector<Piece> pieces_;
  std::map<std::string, Tensor> mirrors_;
};

// The paged decode cases that the every-device test and the GPU kernel-variant test both run:
// every format and mixed page tables, ragged sequences, partly filled and empty spans, an empty
// sequence, GQA up to 16/1, head_dim 32 (the shipped model's), 64 and 128, and a 2240-token
// sequence (many split-K items).
struct PagedCase {
  const char* name;
  int64_t heads, kv_heads, d;
  std::vector<std::vector<int32_t>> seq_spans;  // tokens per span, per sequence
  std::vector<kv::KvFormat> formats;            // drawn per span
};

inline std::vector<PagedCase> PagedDecodeCases() {
  using kv::KvFormat;
  const std::vector<int32_t> long_seq(70, 32);
  return {
      {"f16 GQA 14/2 d64 ragged",
       14,
       2,
       64,
       {{16, 16, 16, 5}, {}, {16, 0, 16, 1}, long_seq},
       {KvFormat::kF16}},
      {"f32 d128", 4, 2, 128, {{16, 16, 7}, {3}}, {KvFormat::kF32}},
      {"int4 8/2 d128", 8, 2, 128, {{32, 32, 32, 17}, {1}, long_seq}, {KvFormat::kInt4}},
      {"int2 14/2 d64", 14, 2, 64, {{32, 32, 9}, {32, 32, 32, 32}, long_seq}, {KvFormat::kInt2}},
      {"mixed formats 16/1 d128 (two warps per KV head)",
       16,
       1,
       128,
       {{32, 32, 32, 32, 20}, {32, 3}, long_seq},
       {KvFormat::kF16, KvFormat::kInt4, KvFormat::kInt2, KvFormat::kF32}},
      {"mixed formats 4/2 d32 (the shipped model's heads)",
       4,
       2,
       32,
       {{32, 32, 32, 7}, {5}, long_seq},
       {KvFormat::kF16, KvFormat::kInt4, KvFormat::kInt2, KvFormat::kF32}},
      {"mixed formats 14/2 d64",
       14,
       2,
       64,
       {{32, 32, 32, 32, 32, 32, 11}, {}, {32, 1}, long_seq},
       {KvFormat::kF16, KvFormat::kInt4, KvFormat::kInt2}},
  };
}

// Case c's spans in `arena` (pages of 32 slots, each span's format drawn from c.formats); returns
// the span offsets of its sequences (B + 1 entries).
inline std::vector<int32_t> FillArena(const PagedCase& c, SpanArena& arena, std::mt19937_64& rng) {
  std::vector<int32_t> offsets = {0};
  std::uniform_int_distribution<size_t> pick(0, c.formats.size() - 1);
  for (const auto& seq : c.seq_spans) {
    for (int32_t n : seq) arena.Add(c.formats[pick(rng)], n, 32, c.kv_heads, c.d, rng);
    offsets.push_back(offsets.back() + static_cast<int32_t>(seq.size()));
  }
  return offsets;
}

// A prefill op's past (ops::PagedKv of one sequence): `tokens` random tokens in pages of 32 slots,
// the page formats taken in turn from `formats` (quantised ones need d % 32 == 0), with what they
// hold once stored, [tokens, G, d] in order, for an f64 reference.
class PagedPast {
 public:
  PagedPast(int64_t tokens, int64_t kv_heads, int64_t d, std::vector<kv::KvFormat> formats,
            std::mt19937_64& rng)
      : kv_heads_(kv_heads), d_(d) {
    size_t i = 0;
    for (int64_t at = 0; at < tokens; at += 32, ++i) {
      const auto n = static_cast<int32_t>(std::min<int64_t>(32, tokens - at));
      arena_.Add(formats[i % formats.size()], n, 32, kv_heads, d, rng);
      keys_.insert(keys_.end(), arena_.keys(i).begin(), arena_.keys(i).end());
      values_.insert(values_.end(), arena_.values(i).begin(), arena_.values(i).end());
    }
    offsets_[1] = static_cast<int32_t>(i);
  }

  // The past as an op reads it on `device` (valid until the next call).
  ops::PagedKv View(const Device& device) {
    spans_ = arena_.Spans(device);
    return ops::PagedKv{spans_, offsets_, static_cast<int>(kv_heads_), static_cast<int>(d_)};
  }
  const std::vector<double>& keys() const { return keys_; }
  const std::vector<double>& values() const { return values_; }

 private:
  int64_t kv_heads_, d_;
  SpanArena arena_;
  std::vector<ops::KvSpan> spans_;
  std::array<int32_t, 2> offsets_ = {0, 0};
  std::vector<double> keys_, values_;
};

}  // namespace framezip::engine::test
