// Token-level sparse prefill attention (ZipVL, docs/methods.md §1.1 step 8; FastV's pruned layers).
//
// For a prefill chunk with queries q [T, H, d] and keys/values k, v [T, G, d] (post-RoPE, at the
// tokens' original positions), and an important set T_imp of chunk rows (sorted ascending):
//   - rows in T_imp attend, causally in compacted order, to the `past` keys the layer already
//     stores (earlier chunks) followed by K[T_imp], V[T_imp]: this is ops::CausalAttention on the
//     compacted Q[T_imp], K[T_imp], V[T_imp], so the work is |T_imp|²/T² of dense;
//   - the other rows (U), by `rest.mode`: get 0 (kZero); attend to the past plus the T_imp rows
//     before them in the original order (kImportant: a prefix of the compacted keys, through
//     AttentionParams::key_limit; O(|U|·|T|)); or attend to a sliding window of all tokens plus
//     attention sinks (kLocal, ops::LocalWindowAttention; O(|U|·window)).
// Sorting T_imp and keeping post-RoPE keys is what makes the compaction exact: no custom sparse
// kernel, the same blocked CPU kernel as dense attention.
//
// `important` holds one list (head-shared: every query head uses it) or G lists (per KV head:
// the query heads of KV head g use list g).
//
// Shapes: q, out [T, H, d]; k, v [T, G, d], all f32, row-major, on one device. `past`: the
// layer's earlier tokens (earlier chunks) as pages on that device (ops/paged_kv.h: one sequence,
// or none), gathered once to dense f32 before the attention.
// Errors: INVALID_ARGUMENT naming the mismatch or the bad index; on a GPU, what the ops it calls
// answer (RESOURCE_EXHAUSTED for the temporaries, UNIMPLEMENTED beyond the kernels' head_dim).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/attention_local.h"
#include "engine/ops/paged_kv.h"

namespace framezip::engine::ops {

// What the rows outside the important set get.
struct RestRows {
  enum class Mode : uint8_t { kZero, kImportant, kLocal };
  Mode mode = Mode::kZero;
  LocalWindow local;  // kLocal only
};

Status SparsePrefillAttention(const Tensor& q, const Tensor& k, const Tensor& v,
                              const PagedKv& past, std::span<const std::vector<int32_t>> important,
                              const RestRows& rest, Tensor& out);

}  // namespace framezip::engine::ops
