// LowRankFactor: one factor of an AttentionPack block (U·S [T, R] or Vᵀ [R, HD], row-major) as it
// is held between decode steps, in f16 or in 4-bit integers (docs/methods.md §2.4, "factor
// format").
//
// The int4 layout quantises each column symmetrically over groups of kInt4GroupRows rows: one f16
// scale per (row group, column), q = round(x / scale) in [-7, 7], stored as q + 8 in a nibble (low
// nibble first, rows·cols nibbles packed). Columns, not rows, share a scale because the columns
// of U·S carry the singular values: column 0 is an order of magnitude larger than column R-1,
// while the tokens of one column (32 at a time) vary far less (KIVI quantises keys per channel
// for the same reason, docs/methods.md §1.4). Vᵀ's columns are the HD channels of orthonormal
// rows; R ≤ 32 rows make one group. At ranks 8/16 of HD = 64 this costs 12 bytes of nibbles and
// 1.5 bytes of scales per token and layer, against 48 bytes in f16.
//
// Not ops/kv_quant.h's KIVI pages: their packing works in blocks of 32 channels, and U·S has only
// R columns (8 or 16), which would pad every token's row to 32 nibbles; and the factors are
// centred on zero, so a symmetric scale without a zero point spends no bytes on it.
//
// Thread-safety: a value type; const methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/core/half.h"
#include "engine/ops/factor_view.h"

namespace framezip::engine::kv {

enum class FactorFormat : uint8_t { kF16 = 0, kInt4 = 1 };

std::string_view FactorFormatName(FactorFormat f);  // "f16" | "int4"
StatusOr<FactorFormat> ParseFactorFormat(std::string_view name);

inline constexpr int64_t kInt4GroupRows = 32;

class LowRankFactor {
 public:
  LowRankFactor() = default;

  // `values` [rows, cols] row-major, rounded to `format`.
  static LowRankFactor Encode(std::span<const float> values, int64_t rows, int64_t cols,
                              FactorFormat format);
  // From stored parts (the page codec): checks every size against rows × cols and the format.
  static StatusOr<LowRankFactor> FromParts(FactorFormat format, int64_t rows, int64_t cols,
                                           std::vector<Float16> f16, std::vector<uint8_t> packed,
                                           std::vector<Float16> scales);

  // The f32 values into `out` (resized), all rows.
  void DecodeInto(std::vector<float>& out) const;
  // The factor as decode kernels read it, a chunk of rows at a time (valid while this lives).
  ops::FactorView View() const;
  std::vector<float> Decode() const;

  FactorFormat format() const { return format_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  size_t bytes() const;

  // What the page codec writes (one of f16 or packed + scales is empty, by format).
  const std::vector<Float16>& f16() const { return f16_; }
  const std::vector<uint8_t>& packed() const { return packed_; }
  const std::vector<Float16>& scales() const { return scales_; }

  // Sizes of the int4 parts for a [rows, cols] factor.
  static size_t PackedBytes(int64_t rows, int64_t cols);
  static size_t ScaleCount(int64_t rows, int64_t cols);

  bool operator==(const LowRankFactor& other) const;

 private:
  FactorFormat format_ = FactorFormat::kF16;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::vector<Float16> f16_;
  std::vector<uint8_t> packed_;
  std::vector<Float16> scales_;
};

}  // namespace framezip::engine::kv
