// AttentionPack on a GPU (engine/kernels/cuda/low_rank.cuh): packing factors into their stored
// formats where the SVD left them, and LowRankBlockAttend (low_rank.h) for a block whose factors,
// positions and ranks live in device memory, as one fused decompress-and-attend kernel pair. The
// CPU code is the reference of both (tests/unit/engine/low_rank_device_test.cc: each device against
// the f64 references, and a GPU's packed bytes against the CPU encoder's).
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/ops/low_rank.h"

namespace framezip::engine::ops {

// Factors on a GPU, as RandomizedSvd's LowRankFactors: us [m, R] = U·Σ, vt [R, n] = Vᵀ (both
// row-major f32), singular_values [R] descending.
struct DeviceLowRankFactors {
  int rank = 0;
  Tensor us, vt, singular_values;
};

// RandomizedSvd (low_rank.h) of the row-major m × n f32 matrix `a` on its GPU, in the same steps:
// the seeded Gaussian Ω [n, R] drawn on the host exactly as the CPU op draws it, Y = A·Ω, then
// power_iterations times Q = orth(A·orth(Aᵀ·Q)) with Householder QR (cuSOLVER geqrf + orgqr)
// after every product, B = Qᵀ·A, its exact SVD (cuSOLVER gesvd), us = Q·Û·Σ. f32 throughout (the
// cuBLAS handle keeps TF32 off). Singular vectors may differ from the CPU's in sign and, for
// equal singular values, in basis; us·vt agrees within f32 rounding.
// Errors: INVALID_ARGUMENT as the CPU op (rows or cols < 1 or above INT_MAX, a rank outside
// [1, min(m, n)], negative power_iterations, a non-finite entry — counted on the device; the
// message gives the count, not the place), or `a` not an f32 matrix on a GPU; INTERNAL with
// cuSOLVER's info code; RESOURCE_EXHAUSTED when the GPU has no memory for the workspaces;
// UNIMPLEMENTED without CUDA. Synchronises with the device once, to read the status.
StatusOr<DeviceLowRankFactors> RandomizedSvdCuda(const Tensor& a,
                                                 const RandomizedSvdOptions& options);

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
// without CUDA. Returns once the work is queued on framezip's stream of the device.
Status LowRankBlockAttendCuda(const Tensor& q, const LowRankBlockView& block,
                              const LowRankAttentionShape& shape, const RopeParams& rope,
                              float scale, Tensor& weights, Tensor& max, Tensor& sum, Tensor& out);

}  // namespace framezip::engine::ops
