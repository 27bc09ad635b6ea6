// KV page formats. Every page carries one format tag; decode attention reads each format (with
// fused dequantisation for the quantised ones). f32 and f16 are implemented; the other tags are
// reserved for the compression policies (METHODS.md §5.1): int4/int2 KIVI-style pages (keys
// per-channel, values per-token scales) and AttentionPack's low-rank segments.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "engine/core/dtype.h"

namespace framezip::engine::kv {

enum class KvFormat : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kInt4 = 2,     // reserved: 4-bit, group = page
  kInt2 = 3,     // reserved: 2-bit, group = page
  kLowRank = 4,  // reserved: AttentionPack low-rank segment (pre-RoPE keys)
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

// "f32" / "f16" (the implemented formats); INVALID_ARGUMENT for anything else.
StatusOr<KvFormat> ParseKvFormat(std::string_view name);

// Element type of a dense format's K/V slots; UNIMPLEMENTED for the reserved formats.
StatusOr<DType> KvFormatDType(KvFormat f);

}  // namespace framezip::engine::kv
