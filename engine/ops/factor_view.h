// FactorView: a borrowed, read-only view of one AttentionPack factor (U·S [T, R] or Vᵀ [R, HD],
// row-major) in the format a low-rank block stores it (kv/low_rank_factor.h), so the decode
// kernels (ops/low_rank.h) widen only the rows they are about to read instead of the whole
// block every step.
//
// Formats: f32; f16; int4 — symmetric codes q + 8 in nibbles (element i in byte i/2, low nibble
// first) with one f16 scale per (group of `group_rows` rows, column), value = (code − 8)·scale.
//
// Thread-safety: a view of memory someone else owns and keeps alive; DecodeRows is const and
// safe to call concurrently.
#pragma once

#include <cstdint>

#include "engine/core/half.h"

namespace framezip::engine::ops {

struct FactorView {
  enum class Format : uint8_t { kF32, kF16, kInt4 };
  Format format = Format::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const float* f32 = nullptr;       // kF32: rows·cols values
  const Float16* f16 = nullptr;     // kF16: rows·cols values
  const uint8_t* packed = nullptr;  // kInt4: ceil(rows·cols / 2) bytes
  const Float16* scales = nullptr;  // kInt4: ceil(rows / group_rows)·cols scales
  int64_t group_rows = 32;          // kInt4: rows sharing a scale

  static FactorView OfF32(const float* values, int64_t rows, int64_t cols) {
    return {.format = Format::kF32, .rows = rows, .cols = cols, .f32 = values};
  }

  // Rows [first, first + n) as f32 into out [n, cols] (0 <= first, first + n <= rows; unchecked:
  // callers check their views once, ops/low_rank.h). Every path gives the bits the scalar
  // conversions give (F16ToF32; (code − 8)·scale in f32).
  void DecodeRows(int64_t first, int64_t n, float* out) const;
};

}  // namespace framezip::engine::ops
