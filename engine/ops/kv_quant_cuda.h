// KIVI page quantisation on the GPU (engine/kernels/cuda/kv_quant.cuh): writes int4/int2 KV pages
// bit-identical to the CPU writer (engine/kv/quant_page.h, WriteQuantPage), straight from the
// layer's K/V on the device, so a GPU prefill never copies K/V to the host to compress them.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

// k, v [n, G, d] f32 on one GPU; `pages` holds ceil(n / page_tokens) device pointers to pages of
// kv::PageLayout::PageBytes() (quant_page.h's layout), page i
// receiving tokens [i·P, min((i+1)·P, n)) (the last page may be partly filled: the rest of it is
// zeroed). G·d % 32 == 0 and <= 6144, page_tokens % 8 == 0, bits 4 or 2, else INVALID_ARGUMENT;
// UNIMPLEMENTED in builds without CUDA. Returns once the work is queued.
Status QuantizeKvPagesCuda(const Tensor& k, const Tensor& v, int64_t page_tokens, int bits,
                           std::span<void* const> pages);

}  // namespace framezip::engine::ops
