// Gather → dense blocked attention → scatter, per selection group (all heads, or one KV head and
// its query heads). Copies are O(|T_imp|·G·d); the attention itself is the dense kernel's.
#include "engine/ops/attention_sparse.h"

#include <algorithm>
#include <cstring>

#include "engine/ops/attention.h"

namespace framezip::engine::ops {
namespace {

// rows[i] of src [*, src_heads, d], heads [h0, h0 + nh) -> dst [rows.size(), nh, d].
void GatherRows(const float* src, int64_t src_heads, int64_t d, std::span<const int32_t> rows,
                int64_t h0, int64_t nh, float* dst) {
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(dst + static_cast<int64_t>(i) * nh * d, src + (rows[i] * src_heads + h0) * d,
                static_cast<size_t>(nh * d) * sizeof(float));
  }
}

void ScatterRows(const float* src, int64_t nh, int64_t d, std::span<const int32_t> rows,
                 int64_t dst_heads, int64_t h0, float* dst) {
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(dst + (rows[i] * dst_heads + h0) * d, src + static_cast<int64_t>(i) * nh * d,
                static_cast<size_t>(nh * d) * sizeof(float));
  }
}

// The rows of [0, t) outside `imp` (sorted), and for each the number of `imp` rows before it.
struct RestRowSet {
  std::vector<int32_t> rows;
  std::vector<int32_t> important_before;
};

RestRowSet RowsOutside(std::span<const int32_t> imp, int64_t t) {
  RestRowSet r;
  const int64_t p = static_cast<int64_t>(imp.size());
  for (int64_t i = 0, at = 0; i < t; ++i) {
    while (at < p && imp[static_cast<size_t>(at)] < i) ++at;
    if (at < p && imp[static_cast<size_t>(at)] == i) continue;
    r.rows.push_back(static_cast<int32_t>(i));
    r.important_before.push_back(static_cast<int32_t>(at));
  }
  return r;
}

}  // namespace

Status SparsePrefillAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                              const float* past_k, const float* past_v, int64_t past,
                              std::span<const std::vector<int32_t>> important,
                              const RestRows& rest_rows, Tensor& out) {
  if (q.rank() != 3 || k.rank() != 3 || k.shape() != v.shape() || q.shape() != out.shape() ||
      q.dim(0) != k.dim(0) || q.dim(2) != k.dim(2) || q.dtype() != DType::kF32 ||
      k.dtype() != DType::kF32 || v.dtype() != DType::kF32 || out.dtype() != DType::kF32) {
    return InvalidArgumentError(
        "SparsePrefillAttention: want q, out [T, H, d] and k, v [T, G, d] f32; got q {} k {} v {} "
        "out {}",
        ShapeString(q.shape()), ShapeString(k.shape()), ShapeString(v.shape()),
        ShapeString(out.shape()));
  }
  const int64_t t = q.dim(0), heads = q.dim(1), g = k.dim(1), d = q.dim(2);
  if (g <= 0 || heads % g != 0) {
    return InvalidArgumentError("SparsePrefillAttention: {} heads for {} KV heads", heads, g);
  }
  const int64_t groups = static_cast<int64_t>(important.size());
  if (groups != 1 && groups != g) {
    return InvalidArgumentError("SparsePrefillAttention: {} important lists for {} KV heads",
                                groups, g);
  }
  if (past > 0 && (past_k == nullptr || past_v == nullptr)) {
    return InvalidArgumentError("SparsePrefillAttention: {} past tokens without their K/V", past);
  }
  for (const std::vector<int32_t>& list : important) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i] < 0 || list[i] >= t || (i > 0 && list[i] <= list[i - 1])) {
        return InvalidArgumentError(
            "SparsePrefillAttention: important rows must be sorted, distinct and in [0, {})", t);
      }
    }
  }
  std::memset(out.raw_data(), 0, out.nbytes());
  const int64_t rep = heads / g;
  const int64_t hq = groups == 1 ? heads : rep;  // query heads per group
  const int64_t gk = groups == 1 ? g : 1;        // KV heads per group
  for (int64_t gi = 0; gi < groups; ++gi) {
    const std::vector<int32_t>& imp = important[static_cast<size_t>(gi)];
    const int64_t p = static_cast<int64_t>(imp.size());
    const int64_t h0 = groups == 1 ? 0 : gi * rep, kv0 = groups == 1 ? 0 : gi;
    if (rest_rows.mode == RestRows::Mode::kLocal && p < t) {
      // U rows read the original (uncompacted) keys, so they do not need the gather below.
      FZ_RETURN_IF_ERROR(LocalWindowAttention(q, k, v, past_k, past_v, past,
                                              RowsOutside(imp, t).rows, h0, hq, rest_rows.local,
                                              out));
    }
    if (past + p == 0) continue;  // nothing else to attend to: T is empty and there is no past
    // Keys: past first (all earlier positions), then the compacted chunk keys.
    FZ_ASSIGN_OR_RETURN(Tensor kc, Tensor::Empty({1, past + p, gk, d}, DType::kF32));
    FZ_ASSIGN_OR_RETURN(Tensor vc, Tensor::Empty({1, past + p, gk, d}, DType::kF32));
    for (int64_t j = 0; j < past; ++j) {
      const size_t bytes = static_cast<size_t>(gk * d) * sizeof(float);
      std::memcpy(kc.data<float>() + j * gk * d, past_k + (j * g + kv0) * d, bytes);
      std::memcpy(vc.data<float>() + j * gk * d, past_v + (j * g + kv0) * d, bytes);
    }
    GatherRows(k.data<float>(), g, d, imp, kv0, gk, kc.data<float>() + past * gk * d);
    GatherRows(v.data<float>(), g, d, imp, kv0, gk, vc.data<float>() + past * gk * d);
    if (p > 0) {
      FZ_ASSIGN_OR_RETURN(Tensor qc, Tensor::Empty({1, p, hq, d}, DType::kF32));
      FZ_ASSIGN_OR_RETURN(Tensor oc, Tensor::Empty({1, p, hq, d}, DType::kF32));
      GatherRows(q.data<float>(), heads, d, imp, h0, hq, qc.data<float>());
      FZ_RETURN_IF_ERROR(CausalAttention(qc, kc, vc, oc));
      ScatterRows(oc.data<float>(), hq, d, imp, heads, h0, out.data<float>());
    }
    if (rest_rows.mode != RestRows::Mode::kImportant || p == t) continue;
    const RestRowSet outside = RowsOutside(imp, t);
    const std::vector<int32_t>& rest = outside.rows;
    std::vector<int32_t> limit;  // key prefix per U row: the past + the T rows before it
    for (int32_t before : outside.important_before) {
      limit.push_back(static_cast<int32_t>(past + before));
    }
    const int64_t u = static_cast<int64_t>(rest.size());
    FZ_ASSIGN_OR_RETURN(Tensor qu, Tensor::Empty({1, u, hq, d}, DType::kF32));
    FZ_ASSIGN_OR_RETURN(Tensor ou, Tensor::Empty({1, u, hq, d}, DType::kF32));
    GatherRows(q.data<float>(), heads, d, rest, h0, hq, qu.data<float>());
    FZ_RETURN_IF_ERROR(
        Attention(qu, kc, vc, AttentionParams{.causal = false, .key_limit = limit.data()}, ou));
    ScatterRows(ou.data<float>(), hq, d, rest, heads, h0, out.data<float>());
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
