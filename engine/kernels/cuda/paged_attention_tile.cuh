// Device pieces shared by the two paged decode kernels (paged_attention.cu: CUDA-core FMAs,
// paged_attention_mma.cu: tensor cores): row sizes per page format and the warp's staging of a
// tile of K/V rows (and the quantised values' scale/zero) in shared memory. Include from .cu only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "engine/kernels/cuda/cp_async.cuh"
#include "engine/kernels/cuda/paged_attention.cuh"

namespace framezip::engine::cuda::paged {

inline constexpr int kTileTokens = 32;  // tokens staged per step
inline constexpr int kLoadBatch = 8;    // 16-byte loads a lane issues before storing them
inline constexpr unsigned kFull = 0xffffffffu;
inline constexpr float kLog2e = 1.4426950408889634f;

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

// Copies `n` rows of `rb` bytes (row_stride apart in global memory) of K from kb and of V from vb
// into kt/vt (row pitch `pitch`) in Chunk-sized pieces, kLoadBatch in flight per lane.
template <typename Chunk>
__device__ __forceinline__ void CopyRows(const unsigned char* kb, const unsigned char* vb,
                                         size_t row_stride, int rb, int pitch, int n, int lane,
                                         unsigned char* kt, unsigned char* vt) {
  constexpr int kChunk = static_cast<int>(sizeof(Chunk));
  const int cpr = rb / kChunk;
  const int per_mat = n * cpr;
  const int chunks = 2 * per_mat;
  for (int base = 0; base < chunks; base += 32 * kLoadBatch) {
    Chunk buf[kLoadBatch];
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) {
      const int idx = base + u * 32 + lane;
      if (idx < chunks) {
        const bool is_v = idx >= per_mat;
        const int j = is_v ? idx - per_mat : idx;
        const int row = j / cpr, col = j - row * cpr;
        buf[u] = __ldg(
            reinterpret_cast<const Chunk*>((is_v ? vb : kb) + row * row_stride + col * kChunk));
      }
    }
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) {
      const int idx = base + u * 32 + lane;
      if (idx < chunks) {
        const bool is_v = idx >= per_mat;
        const int j = is_v ? idx - per_mat : idx;
        const int row = j / cpr, col = j - row * cpr;
        *reinterpret_cast<Chunk*>((is_v ? vt : kt) + row * pitch + col * kChunk) = buf[u];
      }
    }
  }
}

// One warp copies rows [tok, tok + n) of KV head g of `desc` (K to kt, V to vt, row pitch
// RowBytes + 16) with 16-byte loads (8-byte ones for the one row size that is not a multiple of
// 16: int2 at head_dim 32, 8 bytes), kLoadBatch in flight per lane; for quantised spans also the
// values' scale/zero of those slots as f32: vsc/vze [D/32, kTileTokens]. The caller syncs the warp.
template <int D>
__device__ __forceinline__ void StageTile(const PagedSpanDesc& desc, int kv_heads, int g, int tok,
                                          int n, int lane, unsigned char* kt, unsigned char* vt,
                                          float* vsc, float* vze) {
  const int fmt = desc.format;
  const int rb = RowBytes<D>(fmt);
  const int pitch = rb + 16;
  const size_t row_stride = static_cast<size_t>(kv_heads) * rb;
  const unsigned char* kb = static_cast<const unsigned char*>(desc.k) +
                            static_cast<size_t>(tok) * row_stride + static_cast<size_t>(g) * rb;
  const unsigned char* vb = static_cast<const unsigned char*>(desc.v) +
                            static_cast<size_t>(tok) * row_stride + static_cast<size_t>(g) * rb;
  if (rb % 16 == 0) {
    CopyRows<uint4>(kb, vb, row_stride, rb, pitch, n, lane, kt, vt);
  } else {
    CopyRows<uint2>(kb, vb, row_stride, rb, pitch, n, lane, kt, vt);
  }
  if (IsQuantized(fmt) && lane < n) {  // group-major parameters: a group's slots are adjacent
    const __half* vs = static_cast<const __half*>(desc.v_scale);
    const __half* vz = static_cast<const __half*>(desc.v_zero);
#pragma unroll
    for (int i = 0; i < D / 32; ++i) {
      const int64_t at = static_cast<int64_t>(g * (D / 32) + i) * desc.v_param_stride + tok + lane;
      vsc[i * kTileTokens + lane] = __half2float(vs[at]);
      vze[i * kTileTokens + lane] = __half2float(vz[at]);
    }
  }
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

// The first tile of at most `remaining` tokens at or after token `tok` of span `span` (spans
// without tokens left are skipped); n == 0 when nothing remains. desc receives the tile's span.
struct PagedTile {
  int span = 0;
  int tok = 0;
  int n = 0;
};

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

// Launches the tensor-core kernel's partials (paged_attention_mma.cu); the caller launches the
// merge. Same contract as the CUDA-core kernel: partial output, max (log2 units) and sum per item
// and query head in params.workspace.
template <int D>
cudaError_t LaunchPagedDecodeMmaPartials(const PagedDecodeLaunch& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda::paged
