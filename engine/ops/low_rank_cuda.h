// AttentionPack on a GPU (engine/kernels/cuda/low_rank.cuh): packing factors into their stored
// formats where the SVD left them, and LowRankBlockAttend (low_rank.h) for a block whose factors,
// positions and ranks live in device memory, as one fused decompress-and-attend kernel pair. The
// CPU code is the reference of both (tests/unit/engine/low_rank_attend_cuda_test.cc).
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/low_rank.h"

namespace framezip::engine::ops {

// Rows of int4 factors sharing a scale: kv::kInt4GroupRows, FactorView's default.
inline constexpr int64_t kFactorInt4GroupRows = 32;

// Packs `values` [rows, cols] f32 (on a GPU) into a factor's stored format, byte for byte what
// kv::LowRankFactor::Encode writes: kF16 into `data` (u8, rows·cols·2 bytes; `scales` unused);
// kInt4 into `data` (u8, ceil(rows·cols / 2) bytes) and `scales` (u8, ceil(rows / 32)·cols·2
// bytes of f16), both on values' GPU. Errors: INVALID_ARGUMENT for another format or a tensor of
// the wrong size, type or device; UNIMPLEMENTED without CUDA. Returns once the work is queued.
Status EncodeLowRankFactorCuda(const Tensor& values, FactorView::Format format, Tensor& data,
                               Tensor& scales);

// The block attention of one query row, as LowRankBlockAttend computes it, with `block`'s views
// and spans pointing into the memory of q's GPU (the spans only carry pointer and size here: the
// host never reads them). q [H, d] f32; outputs on the same GPU, f32: weights [H, T], max [H],
// sum [H], out [H, d] (BlockAttention's fields). scale 0 means 1/sqrt(d).
// Positions and ranks are not checked on the host: the caller built them from a checked block
// (kv::LowRankBlock); a rank above R_v is read as R_v.
// Errors: INVALID_ARGUMENT for what CheckLowRankBlockShape refuses, a tensor of the wrong shape,
// type or device, or a shape the kernel cannot hold in shared memory; UNIMPLEMENTED in builds
// without CUDA. Returns once the work is queued on the device's default stream.
Status LowRankBlockAttendCuda(const Tensor& q, const LowRankBlockView& block,
                              const LowRankAttentionShape& shape, const RopeParams& rope,
                              float scale, Tensor& weights, Tensor& max, Tensor& sum, Tensor& out);

}  // namespace framezip::engine::ops
