// Paged decode attention on tensor cores (PagedDecodeLaunch::tensor_cores): the CUDA-core kernel's
// split-K scheme and staging (paged_attention_tile.cuh), with the two products as
// mma.sync.m16n8k16 (f16 operands, f32 accumulation). One warp serves up to 16 query heads of
// one KV head (the MMA's M; rows past the group's heads are zero and never written):
//   scores S[16 × 8 tokens] = (q ⊙ key scale)[16 × D] · codes or K rowsᵀ, k-step 16 channels;
//     key codes (0..15, exact in f16) go straight into B fragments, q·zero is added after;
//   P·V O[16 × D] += P[16 × 16 tokens] · V[16 tokens × D], P reused from the score fragments in
//     registers (FlashAttention-2's layout trick), values dequantised per token in f32 then f16.
// Fragment layouts (PTX ISA, mma.m16n8k16 .f16): gid = lane / 4, tig = lane % 4;
//   A regs {row gid, cols 2tig..+1}, {gid+8, 2tig..}, {gid, 2tig+8..}, {gid+8, 2tig+8..};
//   B regs {k 2tig..+1, n gid}, {k 2tig+8..+9, n gid}; C {row gid, n 2tig..+1}, {gid+8, ...}.
#include <cuda_fp16.h>

#include <atomic>
#include <cmath>

#include "engine/kernels/cuda/mma_fragments.cuh"
#include "engine/kernels/cuda/paged_attention_tile.cuh"

namespace framezip::engine::cuda::paged {
namespace {

constexpr int kMmaWarps = 4;
constexpr int kMmaRows = 16;  // query heads per warp

template <int D>
struct MmaSmem {
  static constexpr int kQs = 0;                   // [16, D] q in log2 units, rows past nh zero
  static constexpr int kVs = kQs + kMmaRows * D;  // [D/32, kTileTokens] value scale
  static constexpr int kVz = kVs + (D / 32) * kTileTokens;
  static constexpr int kKp = kVz + (D / 32) * kTileTokens;  // f16 [2, D]: key scale, zero
  static constexpr int kFloats = kKp + D;
  static constexpr int kBytes = kFloats * 4 + 2 * TileBytes<D>();
  static_assert(kFloats % 4 == 0, "16-byte alignment of the tiles");
};

// B fragment of Kᵀ for k-step kk: channels kk·16 + 2tig (+1) and +8 (+9) of this lane's token row.
template <int D>
__device__ __forceinline__ void KeyFragment(int fmt, const unsigned char* row, int kk, int tig,
                                            uint32_t& b0, uint32_t& b1) {
  const int c = kk * 16 + 2 * tig;
  if (fmt == static_cast<int>(PagedKvFormat::kF16)) {
    b0 = *reinterpret_cast<const uint32_t*>(row + c * 2);
    b1 = *reinterpret_cast<const uint32_t*>(row + (c + 8) * 2);
  } else if (fmt == static_cast<int>(PagedKvFormat::kF32)) {
    const float2 x = *reinterpret_cast<const float2*>(row + c * 4);
    const float2 y = *reinterpret_cast<const float2*>(row + (c + 8) * 4);
    b0 = PackHalf2(x.x, x.y);
    b1 = PackHalf2(y.x, y.y);
  } else if (fmt == static_cast<int>(PagedKvFormat::kInt4)) {
    // Block kk/2 (16 bytes); byte j holds channel j (low nibble) and j+16 (high): channels
    // 2tig.. of an even k-step are low nibbles of bytes 2tig, 2tig+1; of an odd one, high nibbles.
    const unsigned char* blk = row + (kk >> 1) * 16;
    const int sh = (kk & 1) * 4;
    const uint32_t w0 = *reinterpret_cast<const uint16_t*>(blk + 2 * tig);
    const uint32_t w1 = *reinterpret_cast<const uint16_t*>(blk + 2 * tig + 8);
    b0 = PackHalf2(CodeToFloat((w0 >> sh) & 15u), CodeToFloat((w0 >> (8 + sh)) & 15u));
    b1 = PackHalf2(CodeToFloat((w1 >> sh) & 15u), CodeToFloat((w1 >> (8 + sh)) & 15u));
  } else {
    // int2: block kk/2 (8 bytes); byte j holds channels j, j+8, j+16, j+24 at shifts 0, 2, 4, 6.
    const unsigned char* blk = row + (kk >> 1) * 8;
    const int sh0 = (kk & 1) * 4, sh1 = sh0 + 2;
    const uint32_t w = *reinterpret_cast<const uint16_t*>(blk + 2 * tig);
    b0 = PackHalf2(CodeToFloat((w >> sh0) & 3u), CodeToFloat((w >> (8 + sh0)) & 3u));
    b1 = PackHalf2(CodeToFloat((w >> sh1) & 3u), CodeToFloat((w >> (8 + sh1)) & 3u));
  }
}

// Value of token t (< n: else 0), channel ch of the staged V tile, dequantised, as f32.
template <int D>
__device__ __forceinline__ float Value(int fmt, const unsigned char* vt, int pitch, int t, int n,
                                       int ch, const float* vsc, const float* vze) {
  if (t >= n) return 0.f;  // stale shared memory past the tile: never multiply it, even by 0
  const unsigned char* row = vt + t * pitch;
  const int j = ch & 31, grp = ch >> 5;
  if (fmt == static_cast<int>(PagedKvFormat::kF16)) {
    return __half2float(reinterpret_cast<const __half*>(row)[ch]);
  }
  if (fmt == static_cast<int>(PagedKvFormat::kF32)) return reinterpret_cast<const float*>(row)[ch];
  uint32_t code;
  if (fmt == static_cast<int>(PagedKvFormat::kInt4)) {
    code = (row[grp * 16 + (j & 15)] >> (j < 16 ? 0 : 4)) & 15u;
  } else {
    code = (row[grp * 8 + (j & 7)] >> (2 * (j >> 3))) & 3u;
  }
  return fmaf(vsc[grp * kTileTokens + t], CodeToFloat(code), vze[grp * kTileTokens + t]);
}

template <int D>
__global__ void __launch_bounds__(kMmaWarps * 32, kMinBlocks<D>)
    PagedDecodeMmaKernel(PagedDecodeLaunch p, int subgroups, int per_subgroup) {
  using L = MmaSmem<D>;
  constexpr int kSteps = D / 16;  // k-steps of the score MMAs
  constexpr int kNb = D / 8;      // n-blocks of the output
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gid = lane >> 2, tig = lane & 3;
  unsigned char* my = smem_raw + static_cast<size_t>(warp) * L::kBytes;
  float* qs = reinterpret_cast<float*>(my) + L::kQs;
  __half* kp = reinterpret_cast<__half*>(reinterpret_cast<float*>(my) + L::kKp);
  float* vsc = reinterpret_cast<float*>(my) + L::kVs;
  float* vze = reinterpret_cast<float*>(my) + L::kVz;
  unsigned char* kt = my + L::kFloats * 4;
  unsigned char* vt = kt + TileBytes<D>();

  const int64_t w = static_cast<int64_t>(blockIdx.x) * kMmaWarps + warp;
  const int64_t total = static_cast<int64_t>(p.num_items) * p.kv_heads * subgroups;
  if (w >= total) return;  // whole warp
  const int sg = static_cast<int>(w % subgroups);
  const int g = static_cast<int>((w / subgroups) % p.kv_heads);
  const int64_t item_index = w / (static_cast<int64_t>(subgroups) * p.kv_heads);
  const int rep = p.heads / p.kv_heads;
  const int nh = min(per_subgroup, rep - sg * per_subgroup);
  if (nh <= 0) return;
  const int h0 = g * rep + sg * per_subgroup;
  const PagedWorkItem item = p.items[item_index];
  const float qscale = p.scale * kLog2e;
  const float* qrows = p.q + (static_cast<int64_t>(item.seq) * p.heads + h0) * D;

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows gid, gid + 8
  float o[kNb][4];
#pragma unroll
  for (int nb = 0; nb < kNb; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.f;
  for (int r = 0; r < kMmaRows; ++r) {
    for (int c = lane; c < D; c += 32) qs[r * D + c] = r < nh ? qrows[r * D + c] * qscale : 0.f;
  }
  uint32_t qa[kSteps][4];
  float qz_lo = 0.f, qz_hi = 0.f;

  // K and V copied with cp.async and used one after the other, as in the CUDA-core kernel.
  PagedSpanDesc desc;
  PagedTile cur = FindTile<D>(p.spans, item.span, item.token, item.num_tokens, desc);
  int remaining = item.num_tokens;
  if (cur.n > 0) IssueKeyTileAsync<D>(desc, cur, p.kv_heads, g, lane, kt, kp);
  CpAsyncCommit();
  int prepared_span = -1;
  bool prepared_dense = false;  // qa holds the plain query, which every dense span scores with
  while (cur.n > 0) {
    const int span = cur.span, tok = cur.tok, n = cur.n;
    const int fmt = desc.format;
    const bool quant = IsQuantized(fmt);
    const int pitch = RowBytes<D>(fmt) + 16;
    IssueRowsAsync<D>(desc.v, fmt, p.kv_heads, g, tok, n, lane, vt);
    CpAsyncCommit();
    ValueParams<D> value_params;  // in flight until after the scores
    value_params.Load(desc, cur, g, lane);
    CpAsyncWait<1>();  // the tile's K and key scale/zero have landed (V may be in flight)
    __syncwarp();

    // A fragments of q (⊙ the span's key scale) and q·key zero, per quantised span; once for a
    // run of dense spans. This lane's channels kk·16 + 2tig (+1, +8, +9); a quad covers them all.
    if (span != prepared_span && !(prepared_dense && !quant)) {
      prepared_span = span;
      prepared_dense = !quant;
      float z_lo = 0.f, z_hi = 0.f;
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
        for (int half8 = 0; half8 < 2; ++half8) {
          const int c = kk * 16 + 2 * tig + 8 * half8;
          float2 lo = *reinterpret_cast<const float2*>(qs + gid * D + c);
          float2 hi = *reinterpret_cast<const float2*>(qs + (gid + 8) * D + c);
          if (quant) {
            const float2 sc = __half22float2(*reinterpret_cast<const __half2*>(kp + c));
            const float2 ze = __half22float2(*reinterpret_cast<const __half2*>(kp + D + c));
            z_lo = fmaf(lo.x, ze.x, fmaf(lo.y, ze.y, z_lo));
            z_hi = fmaf(hi.x, ze.x, fmaf(hi.y, ze.y, z_hi));
            lo = make_float2(lo.x * sc.x, lo.y * sc.y);
            hi = make_float2(hi.x * sc.x, hi.y * sc.y);
          }
          qa[kk][2 * half8] = PackHalf2(lo.x, lo.y);
          qa[kk][2 * half8 + 1] = PackHalf2(hi.x, hi.y);
        }
      }
      z_lo += __shfl_xor_sync(kFull, z_lo, 1);
      z_lo += __shfl_xor_sync(kFull, z_lo, 2);
      z_hi += __shfl_xor_sync(kFull, z_hi, 1);
      z_hi += __shfl_xor_sync(kFull, z_hi, 2);
      qz_lo = z_lo;
      qz_hi = z_hi;
    }

    // Scores for 4 blocks of 8 tokens; columns past n are masked (their B came from stale rows).
    float s[4][4];
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
      if (nb * 8 < n) {  // warp-uniform
        const unsigned char* row = kt + (nb * 8 + gid) * pitch;
#pragma unroll
        for (int kk = 0; kk < kSteps; ++kk) {
          uint32_t b0, b1;
          KeyFragment<D>(fmt, row, kk, tig, b0, b1);
          MmaF16(s[nb], qa[kk], b0, b1);
        }
      }
      const int t0 = nb * 8 + 2 * tig;
      s[nb][0] = t0 < n ? s[nb][0] + qz_lo : -INFINITY;
      s[nb][1] = t0 + 1 < n ? s[nb][1] + qz_lo : -INFINITY;
      s[nb][2] = t0 < n ? s[nb][2] + qz_hi : -INFINITY;
      s[nb][3] = t0 + 1 < n ? s[nb][3] + qz_hi : -INFINITY;
    }

    value_params.Store(quant, n, lane, vsc, vze);
    __syncwarp();  // every lane is done with the K tile and key scale/zero

    remaining -= n;
    PagedSpanDesc next_desc;
    const PagedTile next = FindTile<D>(p.spans, span, tok + n, remaining, next_desc);
    if (next.n > 0) IssueKeyTileAsync<D>(next_desc, next, p.kv_heads, g, lane, kt, kp);
    CpAsyncCommit();
    CpAsyncWait<1>();  // this tile's V has landed (the next tile's K may be in flight)
    __syncwarp();

    // Online softmax per row; a row's 32 scores sit in the 4 lanes of its quad.
    OnlineSoftmaxTile<4, kNb>(s, m, l, o);

    // P·V in two k-steps of 16 tokens.
#pragma unroll
    for (int kstep = 0; kstep < 2; ++kstep) {
      if (kstep * 16 >= n) break;  // warp-uniform
      const uint32_t pa[4] = {PackHalf2(s[2 * kstep][0], s[2 * kstep][1]),
                              PackHalf2(s[2 * kstep][2], s[2 * kstep][3]),
                              PackHalf2(s[2 * kstep + 1][0], s[2 * kstep + 1][1]),
                              PackHalf2(s[2 * kstep + 1][2], s[2 * kstep + 1][3])};
      const int ta = kstep * 16 + 2 * tig;
#pragma unroll
      for (int nb = 0; nb < kNb; ++nb) {
        const int ch = nb * 8 + gid;
        const uint32_t b0 = PackHalf2(Value<D>(fmt, vt, pitch, ta, n, ch, vsc, vze),
                                      Value<D>(fmt, vt, pitch, ta + 1, n, ch, vsc, vze));
        const uint32_t b1 = PackHalf2(Value<D>(fmt, vt, pitch, ta + 8, n, ch, vsc, vze),
                                      Value<D>(fmt, vt, pitch, ta + 9, n, ch, vsc, vze));
        MmaF16(o[nb], pa, b0, b1);
      }
    }
    __syncwarp();  // the next tile overwrites the V rows and value scale/zero

    cur = next;
    desc = next_desc;
  }

  float* part_acc = p.workspace;
  float* part_ml = p.workspace + static_cast<size_t>(p.num_items) * p.heads * D;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = gid + 8 * i;
    if (r >= nh) continue;
    const size_t slot = static_cast<size_t>(item_index) * p.heads + h0 + r;
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) {
      part_acc[slot * D + nb * 8 + 2 * tig] = o[nb][2 * i];
      part_acc[slot * D + nb * 8 + 2 * tig + 1] = o[nb][2 * i + 1];
    }
    if (tig == 0) {
      part_ml[slot * 2] = m[i];
      part_ml[slot * 2 + 1] = l[i];
    }
  }
}

}  // namespace

template <int D>
cudaError_t LaunchPagedDecodeMmaPartials(const PagedDecodeLaunch& p, cudaStream_t stream) {
  const int rep = p.heads / p.kv_heads;
  const int subgroups = (rep + kMmaRows - 1) / kMmaRows;
  const int per_subgroup = (rep + subgroups - 1) / subgroups;
  const int64_t warps = static_cast<int64_t>(p.num_items) * p.kv_heads * subgroups;
  if (warps == 0) return cudaSuccess;
  const int64_t blocks = (warps + kMmaWarps - 1) / kMmaWarps;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  constexpr int kSmem = kMmaWarps * MmaSmem<D>::kBytes;
  static std::atomic<uint64_t> opted_in{0};  // the > 48 KB opt-in, once per device
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (opted_in.load(std::memory_order_relaxed) & bit) == 0) {
    err = cudaFuncSetAttribute(PagedDecodeMmaKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kSmem);
    if (err != cudaSuccess) return err;
    opted_in.fetch_or(bit, std::memory_order_relaxed);
  }
  PagedDecodeMmaKernel<D><<<static_cast<unsigned>(blocks), kMmaWarps * 32, kSmem, stream>>>(
      p, subgroups, per_subgroup);
  return cudaGetLastError();
}

template cudaError_t LaunchPagedDecodeMmaPartials<64>(const PagedDecodeLaunch&, cudaStream_t);
template cudaError_t LaunchPagedDecodeMmaPartials<128>(const PagedDecodeLaunch&, cudaStream_t);

}  // namespace framezip::engine::cuda::paged
