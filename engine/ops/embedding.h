// Embedding: a row gather, out[i, :] = table[ids[i], :] converted to f32 (nn.Embedding;
// padding_idx has no effect at inference).
//
// table [V, H] f32/bf16/f16; ids [N] i32; out [N, H] f32.
// Errors: OUT_OF_RANGE naming the first id outside [0, V); INVALID_ARGUMENT on shape/dtype
// mismatch or tensors on different devices (on a GPU the ids are copied to the host to be
// checked); UNIMPLEMENTED/UNAVAILABLE on a CUDA device in a CPU-only build or without a GPU.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

Status Embedding(const Tensor& table, const Tensor& ids, Tensor& out);

// The same when the caller holds the ids on the host too (host_ids: the values of `ids`, as a step
// plan has them): they are checked there, so a GPU copies nothing back and does not wait.
Status Embedding(const Tensor& table, const Tensor& ids, std::span<const int32_t> host_ids,
                 Tensor& out);

}  // namespace framezip::engine::ops
