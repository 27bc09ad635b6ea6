// The AMX layout of a model's bf16 weights, packed once per weight instead of on every Linear
// call (ops/gemm_amx.h: TDPBF16PS reads Wᵀ in pair-interleaved 16×32 tiles).
//
// Why: packing W costs K·N per call whatever the number of rows, so for a short prefill chunk —
// a 64-frame video on the shipped model, or Dynamic-LLaVA's pruned layers with a fifth of the
// rows — packing cost as much as the multiply itself. llama.cpp's AMX backend repacks its weights
// once at load for the same reason. The cost is memory: each bf16 weight the AMX path reads is
// held a second time (the GEMV of decode steps reads the original layout).
//
// Contract: a weight's contents must not change while its Buffer lives (they are a model's
// weights). Only weights in owning buffers (Buffer::owns_memory) are cached, keyed by their
// address and checked against the buffer's ownership, so a weight freed and another allocated at
// the same address is packed anew. Views (Tensor::View) are packed per call by the caller.
//
// Thread-safety: safe to call concurrently; the first call for a weight packs it (in parallel on
// ComputePool(), outside the cache's lock; two first calls may both pack, one copy is kept).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/tensor.h"

namespace framezip::engine::ops::cpu {

// Weight W [N, K] bf16 packed as strips of `strip_cols` rows of W: strip s (rows
// [s·strip_cols, ...)) starts at s · AmxPackedColumnsSize(strip_cols, K), as
// PackBf16ColumnsForAmx lays it out. nullptr where the weight cannot be cached (a view).
std::shared_ptr<const std::vector<uint16_t>> PackedAmxWeight(const Tensor& weight,
                                                             int64_t strip_cols);

// Bytes the cache holds now (tests; `framezip bench engine` may report it).
size_t PackedAmxWeightBytes();

}  // namespace framezip::engine::ops::cpu
