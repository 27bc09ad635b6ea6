// Linear and MatMul: the GEMMs of the decoder and the vision tower.
//
//   Linear:  y[..., N] = x[..., K] · W[N, K]ᵀ (+ b[N])     (torch.nn.Linear; W stored [out, in])
//   MatMul:  c[B.., M, N] = a[B.., M, K] · b[B.., K, N]   (or b[B.., N, K]ᵀ when transpose_b)
//            batched over the leading dims (one strided-batched GEMM on the GPU); a rank-2 b is
//            shared by every batch entry.
//
// dtypes: activations x, y, c are f32. The weight W (and bias b) may be f32, bf16 or f16;
// 16-bit weights stay 16-bit in memory. MatMul's a and b share one dtype, f32, bf16 or f16: a
// product of two 16-bit values is exact in f32, so 16-bit operands differ from f32 ones only in
// how they were rounded before the call. CPU strategy:
//   - M > kLinearGemvMaxRows (prefill, ViT): bf16 W on a CPU with AMX goes to the AMX kernel;
//     otherwise W is converted tile by tile (a few hundred rows at a time, inside each thread) to
//     f32 and multiplied with OpenBLAS sgemm; tiles run in parallel on ComputePool() with
//     OpenBLAS single-threaded.
//   - small M (decode steps; without AMX also up to 64 rows of a 16-bit W with K >= 512, a
//     follow-up question's prefill): a GEMV kernel reads each 16-bit weight row once and dots it
//     with every row of x (AVX2/FMA or AVX-512 chosen at run time, portable fallback).
// Accumulation is in f32 throughout.
//
// int8 weights (the overload with weight_scale; quantize_int8.h): W ≈ q · scale per output
// channel, and x is quantised per row to int8 as well, so the products are int8 × int8 summed
// exactly in int32 and scaled once per output (kernels and their choice in gemm_int8.h: AMX-INT8
// past kLinearGemvMaxRows rows, else AVX512-VNNI, AVX2 or portable). CPU only: a CUDA device
// answers UNIMPLEMENTED.
//
// FP8 weights (the same overload with an E4M3 weight; quantize_fp8.h): W ≈ e4m3(q) · scale per
// output channel, x quantised per row to E4M3 on the device, one cuBLASLt FP8 GEMM applying both
// scales in its epilogue (linear_fp8_cuda.cc). GPUs with Fp8LinearAvailable only (sm_90); the CPU
// has no FP8 arithmetic and answers UNIMPLEMENTED.
//
// CUDA (linear_cuda.cc): cuBLAS GEMM with f32 accumulation; with 16-bit weights x is rounded to
// the weight dtype on the GPU first (see there for the accuracy this costs).
// Errors: INVALID_ARGUMENT naming the mismatch (shapes, dtypes, devices: all tensors must be on
// one device); on a CUDA device UNIMPLEMENTED in a CPU-only build, UNAVAILABLE without a GPU.
// y must be preallocated with the right shape and must not alias x.
#pragma once

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

// Rows of x at or below which Linear uses the GEMV kernel instead of tiles + sgemm.
inline constexpr int64_t kLinearGemvMaxRows = 16;

// x [..., K] f32; weight [N, K] f32/bf16/f16; bias [N] f32/bf16/f16 or an undefined Tensor();
// y [..., N] f32 (same leading dims as x).
Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y);

// weight [N, K] i8 or f8e4m3 with weight_scale [N] f32 (W ≈ weight[j][k] · weight_scale[j]); the
// rest as above. An undefined weight_scale means a 16-bit (or f32) weight: the Linear above, so a
// layer whose projections may be any of these calls this one. INVALID_ARGUMENT when an int8 or
// FP8 weight comes without its scales.
Status Linear(const Tensor& x, const Tensor& weight, const Tensor& weight_scale, const Tensor& bias,
              Tensor& y);

// Whether Linear runs FP8 weights on `device`: a GPU whose cuBLASLt applies per-channel scales
// in an FP8 GEMM's epilogue (compute capability 9.x). False on the CPU and in builds without CUDA.
bool Fp8LinearAvailable(Device device);

// Readies `weight` for Linear's many-row path ahead of use: on a CPU with AMX a bf16 weight in an
// owning buffer is packed into the tile layout now (ops/amx_weight_cache.h) instead of at its
// first call with more than kLinearGemvMaxRows rows; elsewhere nothing. Engines call it at load,
// so that no request pays the packing (Qwen2-0.5B: ~0.7 s, at the first prefill).
void PrepareLinearWeight(const Tensor& weight);
// The same for an int8 weight: packs it (with its scales) into the layout every int8 kernel reads
// (gemm_int8.h), on any CPU. An undefined weight_scale means a 16-bit weight: the one above.
void PrepareLinearWeight(const Tensor& weight, const Tensor& weight_scale);

// PrepareLinearWeight, and the tensor to keep in the weight's place. For an int8 weight on the
// CPU: a tensor of the same dtype and shape whose memory is the packed layout alone, which
// Linear (with the same scales) reads as that weight, so that the row-major int8 copy can be let
// go — an int8 model then holds its projections once (1 byte a weight) instead of twice. Its bytes
// are not row-major: only Linear and PrepareLinearWeight may read them (a packed weight cannot be
// copied to a GPU, nor packed again). Every other weight comes back as it is (a bf16 weight's
// original layout is what decode's GEMV reads).
StatusOr<Tensor> PackLinearWeight(const Tensor& weight, const Tensor& weight_scale);

// a [B.., M, K]; b [B.., K, N] (or [B.., N, K] when transpose_b) with a's leading dims, or rank 2
// for every batch entry; a and b f32, bf16 or f16 (the same); c [B.., M, N] f32, not aliasing.
Status MatMul(const Tensor& a, const Tensor& b, bool transpose_b, Tensor& c);

}  // namespace framezip::engine::ops
