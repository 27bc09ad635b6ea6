// Sliding-window attention for selected rows of a prefill chunk: ZipVL's U rows in the
// `u_rows=local` mode (engine/compress/zipvl.h).
//
// Row i of the chunk (key-sequence index p = past + i) attends, per query head, to
//   - the first `sinks` keys of the layer's key sequence (attention sinks: earlier chunks first,
//     then this chunk), and
//   - the `window` keys ending at itself, [p - window + 1, p], of ALL tokens (important or not),
// with the usual 1/sqrt(d) softmax. Each row sees at most sinks + window keys, so the cost is
// O(rows · (sinks + window) · d) — linear in the chunk, where attending to T is O(|U| · |T|).
// Why this helps: with u_rows=skip a U row gets no attention output at all, so its hidden state
// (and its K/V in every later layer) drifts from dense; most of what a video token attends to in
// the early layers is its own and the neighbouring frames, which a short window holds.
//
// Shapes: q, out [T, H, d]; k, v [T, G, d], all f32 row-major; `past`: the layer's earlier tokens
// as pages (ops/paged_kv.h: one sequence, or none), read as dense f32 before the kernel runs;
// `rows` are chunk rows, sorted ascending; only the heads [h0, h0 + nh) of those rows are written
// (a per-KV-head selection calls it once per head group). Every other element of `out` is left
// untouched.
// Devices: q, k, v and out on one device, CPU or GPU; the past's pages in that same device's
// memory; `rows` is always a host span. On the GPU head_dim is at most 256 (UNIMPLEMENTED beyond).
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/paged_kv.h"

namespace framezip::engine::ops {

struct LocalWindow {
  int64_t window = 64;  // recent keys, the row's own key included; >= 1
  int64_t sinks = 4;    // leading keys of the sequence; >= 0
};

Status LocalWindowAttention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& past,
                            std::span<const int32_t> rows, int64_t h0, int64_t nh,
                            const LocalWindow& params, Tensor& out);

}  // namespace framezip::engine::ops
