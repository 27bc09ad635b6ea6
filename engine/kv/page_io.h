// Reads and writes of KV page slots where the pool's pages live (host or GPU), so a GPU-resident
// cache is written by kernels straight from the layer's K/V on the device and never round-trips
// through the host. (Dense pages are written by ops::WriteKvPageRuns, one call per append.)
//
// All k/v pointers address [n, G, d] f32 rows on pool.device(). On the CPU these are the loops
// SequenceKv always ran (quant_page.h's writer); on a GPU, ops::CopyRowSlices and
// ops::QuantizeKvPagesCuda, each bit-identical to its CPU counterpart (their [cuda] tests).
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/kv/page_pool.h"
#include "engine/ops/paged_kv.h"

namespace framezip::engine::kv {

// Quantises n tokens into the int4/int2 pages `ids`: page i receives tokens
// [i·P, min((i + 1)·P, n)), P = page_tokens; ids.size() == ceil(n / P).
Status WriteQuantPages(const PagePool& pool, std::span<const PageId> ids, const float* k,
                       const float* v, int64_t n);

// The first n slots of page `id` as the attention ops read pages (ops/paged_kv.h).
ops::KvSpan PageSpan(const PagePool& pool, PageId id, int32_t n);

// The first n tokens of page `id` (any format) as f32; either output may be null. Read through
// ops::GatherPagedKv, as the prefill ops read a past (on a GPU, dequantised there).
Status ReadPageSlots(const PagePool& pool, PageId id, int64_t n, float* k, float* v);

}  // namespace framezip::engine::kv
