// Gather → dense attention → scatter, per selection group (all heads, or one KV head and its
// query heads). Copies are O(|T_imp|·G·d); the attention itself is the dense kernel's. Every step
// is an op that dispatches on the tensors' device (CopyRowSlices, Attention, LocalWindowAttention,
// ZeroBytes), so this one orchestration runs on the CPU and on a GPU.
#include "engine/ops/attention_sparse.h"

#include "engine/core/device_memory.h"
#include "engine/ops/attention.h"
#include "engine/ops/attention_local_backends.h"
#include "engine/ops/op_checks.h"
#include "engine/ops/row_slices.h"

namespace framezip::engine::ops {
namespace {

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

const float* Floats(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }
float* Floats(Tensor& t) { return static_cast<float*>(t.raw_data()); }

// The heads [h0, h0 + nh) of `rows` of x [T, heads, d] -> a new [1, rows, nh, d] tensor.
StatusOr<Tensor> GatherHeads(const Tensor& x, std::span<const int32_t> rows, int64_t h0,
                             int64_t nh) {
  const int64_t heads = x.dim(1), d = x.dim(2), m = static_cast<int64_t>(rows.size());
  FZ_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({1, m, nh, d}, DType::kF32, x.device()));
  FZ_RETURN_IF_ERROR(CopyRowSlices(
      x.device(), m, nh * d, {.data = Floats(x), .stride = heads * d, .col0 = h0 * d, .rows = rows},
      {.data = Floats(out), .stride = nh * d}));
  return out;
}

// The inverse: block [1, rows, nh, d] -> heads [h0, h0 + nh) of `rows` of out [T, heads, d].
Status ScatterHeads(const Tensor& block, std::span<const int32_t> rows, int64_t h0, Tensor& out) {
  const int64_t heads = out.dim(1), d = out.dim(2), nh = block.dim(2);
  return CopyRowSlices(out.device(), static_cast<int64_t>(rows.size()), nh * d,
                       {.data = Floats(block), .stride = nh * d},
                       {.data = Floats(out), .stride = heads * d, .col0 = h0 * d, .rows = rows});
}

// Keys or values a group attends to: the past (all earlier positions) first, then the chunk's
// important rows, KV heads [kv0, kv0 + gk): [1, past + |imp|, gk, d].
StatusOr<Tensor> CompactKeys(const Tensor& chunk, const float* past_rows, int64_t past,
                             std::span<const int32_t> imp, int64_t kv0, int64_t gk) {
  const int64_t g = chunk.dim(1), d = chunk.dim(2), p = static_cast<int64_t>(imp.size());
  FZ_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({1, past + p, gk, d}, DType::kF32, chunk.device()));
  FZ_RETURN_IF_ERROR(CopyRowSlices(chunk.device(), past, gk * d,
                                   {.data = past_rows, .stride = g * d, .col0 = kv0 * d},
                                   {.data = Floats(out), .stride = gk * d}));
  FZ_RETURN_IF_ERROR(
      CopyRowSlices(chunk.device(), p, gk * d,
                    {.data = Floats(chunk), .stride = g * d, .col0 = kv0 * d, .rows = imp},
                    {.data = Floats(out) + past * gk * d, .stride = gk * d}));
  return out;
}

}  // namespace

Status SparsePrefillAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                              const PagedKv& past_pages,
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
  FZ_RETURN_IF_ERROR(CheckOnDevice("SparsePrefillAttention", q.device(), {&k, &v, &out}));
  const int64_t t = q.dim(0), heads = q.dim(1), g = k.dim(1), d = q.dim(2);
  if (g <= 0 || heads % g != 0) {
    return InvalidArgumentError("SparsePrefillAttention: {} heads for {} KV heads", heads, g);
  }
  const int64_t groups = static_cast<int64_t>(important.size());
  if (groups != 1 && groups != g) {
    return InvalidArgumentError("SparsePrefillAttention: {} important lists for {} KV heads",
                                groups, g);
  }
  FZ_RETURN_IF_ERROR(CheckPastKv("SparsePrefillAttention", past_pages, g, d));
  for (const std::vector<int32_t>& list : important) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i] < 0 || list[i] >= t || (i > 0 && list[i] <= list[i - 1])) {
        return InvalidArgumentError(
            "SparsePrefillAttention: important rows must be sorted, distinct and in [0, {})", t);
      }
    }
  }
  // The past once as dense rows, for every group's compaction and the local rows.
  GatheredKv past_rows;
  if (past_pages.batch() > 0) {
    FZ_ASSIGN_OR_RETURN(past_rows, GatherPagedKv(past_pages, 0, q.device()));
  }
  const int64_t past = past_rows.tokens;
  const float* past_k = past > 0 ? past_rows.k.data<float>() : nullptr;
  const float* past_v = past > 0 ? past_rows.v.data<float>() : nullptr;
  FZ_RETURN_IF_ERROR(ZeroBytes(out.raw_data(), out.device(), out.nbytes()));
  const int64_t rep = heads / g;
  const int64_t hq = groups == 1 ? heads : rep;  // query heads per group
  const int64_t gk = groups == 1 ? g : 1;        // KV heads per group
  for (int64_t gi = 0; gi < groups; ++gi) {
    const std::vector<int32_t>& imp = important[static_cast<size_t>(gi)];
    const int64_t p = static_cast<int64_t>(imp.size());
    const int64_t h0 = groups == 1 ? 0 : gi * rep, kv0 = groups == 1 ? 0 : gi;
    if (rest_rows.mode == RestRows::Mode::kLocal && p < t) {
      // U rows read the original (uncompacted) keys, so they do not need the gather below.
      FZ_RETURN_IF_ERROR(LocalWindowAttentionOverRows(
          q, k, v, past_k, past_v, past, RowsOutside(imp, t).rows, h0, hq, rest_rows.local, out));
    }
    if (past + p == 0) continue;  // nothing else to attend to: T is empty and there is no past
    FZ_ASSIGN_OR_RETURN(Tensor kc, CompactKeys(k, past_k, past, imp, kv0, gk));
    FZ_ASSIGN_OR_RETURN(Tensor vc, CompactKeys(v, past_v, past, imp, kv0, gk));
    if (p > 0) {
      FZ_ASSIGN_OR_RETURN(Tensor qc, GatherHeads(q, imp, h0, hq));
      FZ_ASSIGN_OR_RETURN(Tensor oc, Tensor::Empty({1, p, hq, d}, DType::kF32, q.device()));
      FZ_RETURN_IF_ERROR(CausalAttention(qc, kc, vc, oc));
      FZ_RETURN_IF_ERROR(ScatterHeads(oc, imp, h0, out));
    }
    if (rest_rows.mode != RestRows::Mode::kImportant || p == t) continue;
    const RestRowSet outside = RowsOutside(imp, t);
    std::vector<int32_t> limit;  // key prefix per U row: the past + the T rows before it
    for (int32_t before : outside.important_before) {
      limit.push_back(static_cast<int32_t>(past + before));
    }
    const int64_t u = static_cast<int64_t>(outside.rows.size());
    FZ_ASSIGN_OR_RETURN(Tensor qu, GatherHeads(q, outside.rows, h0, hq));
    FZ_ASSIGN_OR_RETURN(Tensor ou, Tensor::Empty({1, u, hq, d}, DType::kF32, q.device()));
    FZ_RETURN_IF_ERROR(
        Attention(qu, kc, vc, AttentionParams{.causal = false, .key_limit = limit.data()}, ou));
    FZ_RETURN_IF_ERROR(ScatterHeads(ou, outside.rows, h0, out));
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
