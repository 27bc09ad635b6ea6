// KV page formats. Every page carries one format tag; decode attention reads each format (with
// fused dequantisation for the quantised ones). f32/f16 pages are dense and appendable; int4/int2
// pages are KIVI-style (docs/methods.md §4.2: keys per-channel over the page's tokens, values per-token
// in groups of 32 channels, f16 scale/zero inside the page; engine/kv/quant_page.h) and written
// once. kLowRank names AttentionPack's low-rank blocks (kv/low_rank_block.h) in byte accounting;
// no page has that format.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/core/dtype.h"

namespace framezip::engine::kv {

enum class KvFormat : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kInt4 = 2,     // 4-bit codes, key group = the page's tokens, value group = 32 channels
  kInt2 = 3,     // 2-bit codes, same grouping
  kLowRank = 4,  // AttentionPack low-rank blocks (accounting only: blocks are not pages)
};

constexpr std::string_view KvFormatName(KvFormat f) {
  switch (f) {
    case KvFormat::kF32:
      return "f32";
    case KvFormat::kF16:
      return "f16";
    case KvFormat::kInt4:
      return "int4";
    case KvFormat::kInt2:
      return "int2";
    case KvFormat::kLowRank:
      return "lowrank";
  }
  return "?";
}

// What a compression policy decides for each token it hands to SequenceKv::Append (one byte per
// token). The sequence's KvPrecision maps each storing class to a page format, so a policy says
// "important" or "rest" and the sequence config says how many bits that means.
enum TokenClass : uint8_t {
  kDrop = 0,       // not stored in this layer (evicted / pruned)
  kFull = 1,       // stored at the sequence's full precision (f16/f32 pages; the residual window)
  kImportant = 2,  // ZipVL's T: stored at the high-bit format
  kRest = 3,       // ZipVL's U: stored at the low-bit format
};

// The page format of each storing TokenClass for one sequence. A policy states it
// (CompressionPolicy::Precision); "none" stores everything at `full`.
struct KvPrecision {
  KvFormat full = KvFormat::kF16;       // kFull tokens, including the decode residual window
  KvFormat important = KvFormat::kF16;  // kImportant tokens
  KvFormat rest = KvFormat::kF16;       // kRest tokens
};

inline constexpr int kNumKvFormats = 5;

// True for the written-once quantised page formats (int4, int2).
constexpr bool IsQuantized(KvFormat f) { return f == KvFormat::kInt4 || f == KvFormat::kInt2; }

// Bits per code of a quantised format (4 or 2); 0 for the others.
constexpr int KvFormatBits(KvFormat f) {
  return f == KvFormat::kInt4 ? 4 : f == KvFormat::kInt2 ? 2 : 0;
}

// Every format a PagePool can hold and page_image()/AdoptPage() round-trip (for tests and the
// page codec): f32, f16, int4, int2.
std::vector<KvFormat> StorableFormats();

// "f32" / "f16" (the full-precision formats an engine's residual pages use); INVALID_ARGUMENT for
// anything else.
StatusOr<KvFormat> ParseKvFormat(std::string_view name);

// Element type of a dense format's K/V slots; UNIMPLEMENTED for the quantised/reserved formats.
StatusOr<DType> KvFormatDType(KvFormat f);

}  // namespace framezip::engine::kv

// fmt prints a KvFormat as its name ("f16", "int4", ...).
template <>
struct fmt::formatter<framezip::engine::kv::KvFormat> : fmt::formatter<std::string_view> {
  auto format(framezip::engine::kv::KvFormat f, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(framezip::engine::kv::KvFormatName(f), ctx);
  }
};
