#include "engine/kv/low_rank_factor.h"

#include <algorithm>
#include <cmath>

namespace framezip::engine::kv {
namespace {

int64_t GroupsOf(int64_t rows) { return (rows + kInt4GroupRows - 1) / kInt4GroupRows; }

}  // namespace

std::string_view FactorFormatName(FactorFormat f) {
  return f == FactorFormat::kInt4 ? "int4" : "f16";
}

StatusOr<FactorFormat> ParseFactorFormat(std::string_view name) {
  if (name == "f16") return FactorFormat::kF16;
  if (name == "int4") return FactorFormat::kInt4;
  return InvalidArgumentError("low-rank factor format '{}': expected f16 or int4", name);
}

size_t LowRankFactor::PackedBytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>((rows * cols + 1) / 2);
}

size_t LowRankFactor::ScaleCount(int64_t rows, int64_t cols) {
  return static_cast<size_t>(GroupsOf(rows) * cols);
}

LowRankFactor LowRankFactor::Encode(std::span<const float> values, int64_t rows, int64_t cols,
                                    FactorFormat format) {
  LowRankFactor f;
  f.format_ = format;
  f.rows_ = rows;
  f.cols_ = cols;
  if (format == FactorFormat::kF16) {
    f.f16_.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) f.f16_[i] = F32ToF16(values[i]);
    return f;
  }
  f.packed_.assign(PackedBytes(rows, cols), 0);
  f.scales_.resize(ScaleCount(rows, cols));
  for (int64_t g = 0; g < GroupsOf(rows); ++g) {
    const int64_t r0 = g * kInt4GroupRows, r1 = std::min(rows, r0 + kInt4GroupRows);
    for (int64_t c = 0; c < cols; ++c) {
      float max_abs = 0.f;
      for (int64_t r = r0; r < r1; ++r) {
        max_abs = std::max(max_abs, std::fabs(values[static_cast<size_t>(r * cols + c)]));
      }
      // Quantise with the scale as stored (rounded to f16), so decode sees the same grid.
      const Float16 scale_h = F32ToF16(max_abs / 7.f);
      f.scales_[static_cast<size_t>(g * cols + c)] = scale_h;
      const float scale = F16ToF32(scale_h);
      const float inv = scale > 0.f ? 1.f / scale : 0.f;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t i = r * cols + c;
        const float q = std::clamp(std::nearbyint(values[static_cast<size_t>(i)] * inv), -7.f, 7.f);
        const uint8_t nibble = static_cast<uint8_t>(static_cast<int>(q) + 8);
        f.packed_[static_cast<size_t>(i / 2)] |= (i % 2 == 0) ? nibble : uint8_t(nibble << 4);
      }
    }
  }
  return f;
}

StatusOr<LowRankFactor> LowRankFactor::FromParts(FactorFormat format, int64_t rows, int64_t cols,
                                                 std::vector<Float16> f16,
                                                 std::vector<uint8_t> packed,
                                                 std::vector<Float16> scales) {
  const size_t n = static_cast<size_t>(rows * cols);
  const bool ok = format == FactorFormat::kF16
                      ? f16.size() == n && packed.empty() && scales.empty()
                      : f16.empty() && packed.size() == PackedBytes(rows, cols) &&
                            scales.size() == ScaleCount(rows, cols);
  if (rows < 1 || cols < 1 || !ok) {
    return DataLossError(
        "low-rank factor: {} of {}x{} with {} f16 values, {} packed bytes, {} "
        "scales",
        FactorFormatName(format), rows, cols, f16.size(), packed.size(), scales.size());
  }
  for (const Float16 s : scales) {
    const float v = F16ToF32(s);
    if (!std::isfinite(v) || v < 0.f) return DataLossError("low-rank factor: scale {}", v);
  }
  LowRankFactor f;
  f.format_ = format;
  f.rows_ = rows;
  f.cols_ = cols;
  f.f16_ = std::move(f16);
  f.packed_ = std::move(packed);
  f.scales_ = std::move(scales);
  return f;
}

void LowRankFactor::DecodeInto(std::vector<float>& out) const {
  out.resize(static_cast<size_t>(rows_ * cols_));
  View().DecodeRows(0, rows_, out.data());
}

ops::FactorView LowRankFactor::View() const {
  using Format = ops::FactorView::Format;
  return {.format = format_ == FactorFormat::kF16 ? Format::kF16 : Format::kInt4,
          .rows = rows_,
          .cols = cols_,
          .f16 = f16_.data(),
          .packed = packed_.data(),
          .scales = scales_.data(),
          .group_rows = kInt4GroupRows};
}

std::vector<float> LowRankFactor::Decode() const {
  std::vector<float> out;
  DecodeInto(out);
  return out;
}

size_t LowRankFactor::bytes() const {
  return (f16_.size() + scales_.size()) * sizeof(Float16) + packed_.size();
}

bool LowRankFactor::operator==(const LowRankFactor& other) const {
  const auto same_bits = [](const std::vector<Float16>& a, const std::vector<Float16>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](Float16 x, Float16 y) { return x.bits == y.bits; });
  };
  return format_ == other.format_ && rows_ == other.rows_ && cols_ == other.cols_ &&
         same_bits(f16_, other.f16_) && packed_ == other.packed_ &&
         same_bits(scales_, other.scales_);
}

}  // namespace framezip::engine::kv
