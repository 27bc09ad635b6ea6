// QuantPage: the byte layout of an int4/int2 KV page and its write/read routines (the arithmetic
// is ops/kv_quant.h). With P = page_tokens, C = G·d channels, b bits, R = C·b/8 bytes per row:
//
//   K part: codes [P rows × R] | k_scale [C] f16 | k_zero [C] f16     (per channel over the page)
//   V part: codes [P rows × R] | v_scale [C/32, P] f16 | v_zero [C/32, P] f16   (per token, group;
//           group-major so a group's parameters for eight consecutive slots are one load)
//
// A quantised page is written ONCE from 1..P tokens (the key scales cover exactly the filled
// tokens) and never appended to; unused rows are zero so page images are deterministic. For
// P = 32 this is 0.75·C (int2) or 1.25·C (int4) bytes per token for K+V against 4·C for f16.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "engine/kv/page_pool.h"
#include "engine/ops/paged_kv.h"

namespace framezip::engine::kv {

size_t QuantPageKeyBytes(const PageLayout& layout);
size_t QuantPageValueBytes(const PageLayout& layout);

// INVALID_ARGUMENT unless the format is int4/int2, head_dim is a multiple of 32 and page_tokens
// a multiple of 8.
Status CheckQuantPageLayout(const PageLayout& layout);

// Quantises n (1..P) tokens k, v [n, G, d] f32 into the page at `page` (PageBytes() bytes).
void WriteQuantPage(const PageLayout& layout, const float* k, const float* v, int64_t n,
                    void* page);

// The attention span of a page's n filled tokens (read back through ops::GatherPagedKv).
ops::KvSpan QuantPageSpan(const PageLayout& layout, const void* page, int32_t n);

}  // namespace framezip::engine::kv
