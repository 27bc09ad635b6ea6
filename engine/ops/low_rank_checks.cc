#include "engine/ops/low_rank_checks.h"

namespace framezip::engine::ops {
namespace {

Status CheckView(std::string_view op, std::string_view name, const FactorView& v, int64_t rows,
                 int64_t cols) {
  if (v.rows != rows || v.cols != cols) {
    return InvalidArgumentError("{}: {} is {}x{}, want {}x{}", op, name, v.rows, v.cols, rows,
                                cols);
  }
  const bool present = v.format == FactorView::Format::kF32 ? v.f32 != nullptr
                       : v.format == FactorView::Format::kF16
                           ? v.f16 != nullptr
                           : v.packed != nullptr && v.scales != nullptr && v.group_rows > 0;
  if (!present) return InvalidArgumentError("{}: {} has no data", op, name);
  return absl::OkStatus();
}

}  // namespace

Status CheckLowRankBlockShape(std::string_view op, const LowRankBlockView& b,
                              const LowRankAttentionShape& s, const RopeParams& rope) {
  if (s.num_kv_heads < 1 || s.num_heads < 1 || s.num_heads % s.num_kv_heads != 0) {
    return InvalidArgumentError("{}: num_heads {} is not a positive multiple of num_kv_heads {}",
                                op, s.num_heads, s.num_kv_heads);
  }
  if (s.head_dim < 2 || s.head_dim % 2 != 0 || rope.head_dim != s.head_dim) {
    return InvalidArgumentError("{}: head_dim {} with rope.head_dim {} (must be equal and even)",
                                op, s.head_dim, rope.head_dim);
  }
  const int64_t tokens = static_cast<int64_t>(b.positions.size());
  const int64_t hd = int64_t{s.num_kv_heads} * s.head_dim;
  const int64_t rank_k = b.key_us.cols, rank_v = b.value_us.cols;
  if (rank_k < 1 || rank_v < 1) {
    return InvalidArgumentError("{}: ranks {} (keys) and {} (values)", op, rank_k, rank_v);
  }
  FZ_RETURN_IF_ERROR(CheckView(op, "key_us", b.key_us, tokens, rank_k));
  FZ_RETURN_IF_ERROR(CheckView(op, "key_vt", b.key_vt, rank_k, hd));
  FZ_RETURN_IF_ERROR(CheckView(op, "value_us", b.value_us, tokens, rank_v));
  FZ_RETURN_IF_ERROR(CheckView(op, "value_vt", b.value_vt, rank_v, hd));
  if (static_cast<int64_t>(b.value_ranks.size()) != tokens) {
    return InvalidArgumentError("{}: value_ranks has {} elements, want {}", op,
                                b.value_ranks.size(), tokens);
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
