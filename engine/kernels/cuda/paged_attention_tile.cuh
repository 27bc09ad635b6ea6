// Device pieces shared by the two paged decode kernels (paged_attention.cu: CUDA-core FMAs,
// paged_attention_mma.cu: tensor cores): row sizes per page format, the walk over a work item's
// tiles, and the warp's asynchronous copies of a tile's K or V rows and of a quantised span's key
// scale/zero into shared memory. Include from .cu only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "engine/kernels/cuda/cp_async.cuh"
#include "engine/kernels/cuda/paged_attention.cuh"

namespace framezip::engine::cuda::paged {

inline constexpr int kTileTokens = 32;  // tokens staged per step
inline constexpr unsigned kFull = 0xffffffffu;
inline constexpr float kLog2e = 1.4426950408889634f;

// Blocks of 4 warps an SM should hold at once, for both kernels' launch bounds: shared memory fits
// 4 at head_dim <= 64 and 2 at 128, so the registers are capped to match (128 a thread at 4).
template <int D>
inline constexpr int kMinBlocks = D <= 64 ? 4 : 2;

// Bytes of one head's row (one token) of a span in `format`.
template <int D>
__host__ __device__ constexpr int RowBytes(int format) {
  return format == static_cast<int>(PagedKvFormat::kF32)    ? 4 * D
         : format == static_cast<int>(PagedKvFormat::kF16)  ? 2 * D
         : format == static_cast<int>(PagedKvFormat::kInt4) ? D / 2
                                                            : D / 4;
}

// Bytes of one staged K (or V) tile: 32 f16 rows padded by 16 bytes (16 f32 rows fit).
template <int D>
__host__ __device__ constexpr int TileBytes() {
  return kTileTokens * (2 * D + 16);
}

template <int D>
__host__ __device__ constexpr int TileTokens(int format) {
  const int n = TileBytes<D>() / (RowBytes<D>(format) + 16);
  return n < kTileTokens ? n : kTileTokens;
}

__device__ __forceinline__ bool IsQuantized(int format) {
  return format == static_cast<int>(PagedKvFormat::kInt4) ||
         format == static_cast<int>(PagedKvFormat::kInt2);
}

// A code in 0..255 as a float, exactly: 2^23 + code, minus 2^23.
__device__ __forceinline__ float CodeToFloat(uint32_t code) {
  return __uint_as_float(0x4B000000u | code) - 8388608.0f;
}

// Issues, without waiting, the copies of rows [tok, tok + n) of KV head g of one matrix (base: the
// span's k or v) into dst (row pitch RowBytes + 16): cp.async in 16-byte pieces, 8-byte ones for
// int2 at head_dim 32. The caller commits the group, waits for it and syncs the warp before
// reading.
template <int D>
__device__ __forceinline__ void IssueRowsAsync(const void* base, int format, int kv_heads, int g,
                                               int tok, int n, int lane, unsigned char* dst) {
  const int rb = RowBytes<D>(format);
  const int pitch = rb + 16;
  const size_t row_stride = static_cast<size_t>(kv_heads) * rb;
  const unsigned char* src = static_cast<const unsigned char*>(base) +
                             static_cast<size_t>(tok) * row_stride + static_cast<size_t>(g) * rb;
  if (rb % 16 == 0) {
    const int cpr = rb / 16;  // a power of two for every format
    for (int idx = lane; idx < n * cpr; idx += 32) {
      const int row = idx / cpr, col = idx - row * cpr;
      CpAsync16(dst + row * pitch + col * 16, src + row * row_stride + col * 16);
    }
  } else {
    for (int row = lane; row < n; row += 32) CpAsync8(dst + row * pitch, src + row * row_stride);
  }
}

// Issues, without waiting, the copies of KV head g's key scale and zero of a quantised span (f16
// [D] each, 16-byte aligned: the adapter checks) into kp[0, D) and kp[D, 2D): one 16-byte piece
// per lane, in the caller's group. Dense spans copy nothing.
template <int D>
__device__ __forceinline__ void IssueKeyParamsAsync(const PagedSpanDesc& desc, int g, int lane,
                                                    __half* kp) {
  constexpr int kPieces = D * 2 / 16;  // per array
  if (!IsQuantized(desc.format) || lane >= 2 * kPieces) return;
  const bool zero = lane >= kPieces;
  const int j = zero ? lane - kPieces : lane;
  const __half* src = static_cast<const __half*>(zero ? desc.k_zero : desc.k_scale) + g * D;
  CpAsync16(kp + (zero ? D : 0) + j * 8, src + j * 8);
}

// A tile of a work item: n tokens from token `tok` of span `span` (n == 0: the item is done).
struct PagedTile {
  int span = 0;
  int tok = 0;
  int n = 0;
};

// The first tile of at most `remaining` tokens at or after token `tok` of span `span` (spans
// without tokens left are skipped); desc receives the tile's span.
template <int D>
__device__ __forceinline__ PagedTile FindTile(const PagedSpanDesc* spans, int span, int tok,
                                              int remaining, PagedSpanDesc& desc) {
  while (remaining > 0) {
    desc = spans[span];
    const int avail = desc.num_tokens - tok;
    if (avail > 0) return {span, tok, min(min(avail, remaining), TileTokens<D>(desc.format))};
    ++span;
    tok = 0;
  }
  return {span, tok, 0};
}

// Issues, without waiting, the copies of a tile's K rows and (quantised spans) its span's key
// scale/zero: what the scores need, as one group once the caller commits.
template <int D>
__device__ __forceinline__ void IssueKeyTileAsync(const PagedSpanDesc& desc, const PagedTile& tile,
                                                  int kv_heads, int g, int lane, unsigned char* kt,
                                                  __half* kp) {
  IssueRowsAsync<D>(desc.k, desc.format, kv_heads, g, tile.tok, tile.n, lane, kt);
  IssueKeyParamsAsync<D>(desc, g, lane, kp);
}

// A quantised tile's value scale/zero, lane t holding token t's of each 32-channel group: Load
// issues the global loads (kept as halves, so nothing waits for them), Store, later, writes them
// as f32 to vsc/vze [D/32, kTileTokens] for the P·V pass. Dense tiles load and store nothing.
template <int D>
struct ValueParams {
  __half scale[D / 32], zero[D / 32];

  __device__ __forceinline__ void Load(const PagedSpanDesc& desc, const PagedTile& tile, int g,
                                       int lane) {
#pragma unroll
    for (int i = 0; i < D / 32; ++i) scale[i] = zero[i] = __float2half(0.f);
    if (!IsQuantized(desc.format) || lane >= tile.n) return;
    const __half* vs = static_cast<const __half*>(desc.v_scale);
    const __half* vz = static_cast<const __half*>(desc.v_zero);
#pragma unroll
    for (int i = 0; i < D / 32; ++i) {  // group-major: a group's slots are adjacent
      const int64_t at =
          static_cast<int64_t>(g * (D / 32) + i) * desc.v_param_stride + tile.tok + lane;
      scale[i] = vs[at];
      zero[i] = vz[at];
    }
  }

  __device__ __forceinline__ void Store(bool quant, int n, int lane, float* vsc, float* vze) const {
    if (!quant || lane >= n) return;
#pragma unroll
    for (int i = 0; i < D / 32; ++i) {
      vsc[i * kTileTokens + lane] = __half2float(scale[i]);
      vze[i * kTileTokens + lane] = __half2float(zero[i]);
    }
  }
};

// Launches the tensor-core kernel's partials (paged_attention_mma.cu); the caller launches the
// merge. Same contract as the CUDA-core kernel: partial output, max (log2 units) and sum per item
// and query head in params.workspace.
template <int D>
cudaError_t LaunchPagedDecodeMmaPartials(const PagedDecodeLaunch& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda::paged
