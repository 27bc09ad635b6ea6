#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "engine/kernels/cuda/cp_async.cuh"
#include "engine/kernels/cuda/paged_attention.cuh"
#include "engine/kernels/cuda/paged_attention_tile.cuh"

namespace framezip::engine::cuda {
namespace {

constexpr int kWarps = 4;  // independent warps per block (no block-wide barrier)
using paged::CodeToFloat;
using paged::IsQuantized;
using paged::kFull;
using paged::kLog2e;
using paged::kTileTokens;
using paged::RowBytes;
using paged::TileTokens;

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// One warp's shared memory: floats first, then the K and V tiles (rows padded by 16 bytes so
// the lanes' 16-byte row reads spread over the banks).
template <int D>
struct WarpSmem {
  static constexpr int kCpl = D / 32;                           // channels per lane in P·V
  static constexpr int kQf = 0;                                 // [kPagedMaxRep, D] folded query
  static constexpr int kQz = kQf + kPagedMaxRep * D;            // [8] q·key zero
  static constexpr int kPs = kQz + 8;                           // [kPagedMaxRep, kTileTokens] p
  static constexpr int kVs = kPs + kPagedMaxRep * kTileTokens;  // [kCpl, kTileTokens] value scale
  static constexpr int kVz = kVs + kCpl * kTileTokens;          // [kCpl, kTileTokens] value zero
  static constexpr int kKp = kVz + kCpl * kTileTokens;          // f16 [2, D]: key scale, zero
  static constexpr int kFloats = kKp + D;
  static constexpr int kTileBytes = paged::TileBytes<D>();  // 32 f16 rows (16 f32 rows)
  static constexpr int kBytes = kFloats * 4 + 2 * kTileBytes;
  static_assert(kFloats % 4 == 0 && kTileBytes % 16 == 0, "16-byte alignment of the tiles");
};

// Grid: one warp per (work item, KV head, query-head subgroup). See the header for the scheme.
// s[r] += q_r[blk·32 .. +32) · x for the first nh query rows: one 32-channel block of decoded
// key codes (the scale was folded into q, the zero point is added later).
template <int D>
__device__ __forceinline__ void AccumulateCodeBlock(const float (&x)[32], const float* qf, int blk,
                                                    int nh, float (&s)[kPagedMaxRep]) {
#pragma unroll
  for (int r = 0; r < kPagedMaxRep; ++r) {
    if (r < nh) {
      const float* qr = qf + r * D + blk * 32;
#pragma unroll
      for (int j = 0; j < 32; j += 4) {
        const float4 a = *reinterpret_cast<const float4*>(qr + j);
        s[r] = fmaf(a.x, x[j], fmaf(a.y, x[j + 1], fmaf(a.z, x[j + 2], fmaf(a.w, x[j + 3], s[r]))));
      }
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32, paged::kMinBlocks<D>)
    PagedDecodeKernel(PagedDecodeLaunch p, int subgroups, int per_subgroup) {
  using L = WarpSmem<D>;
  constexpr int kCpl = L::kCpl;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  unsigned char* my = smem_raw + static_cast<size_t>(warp) * L::kBytes;
  float* qf = reinterpret_cast<float*>(my) + L::kQf;
  float* qz = reinterpret_cast<float*>(my) + L::kQz;
  float* ps = reinterpret_cast<float*>(my) + L::kPs;
  float* vsc = reinterpret_cast<float*>(my) + L::kVs;
  float* vze = reinterpret_cast<float*>(my) + L::kVz;
  __half* kp = reinterpret_cast<__half*>(reinterpret_cast<float*>(my) + L::kKp);
  unsigned char* kt = my + L::kFloats * 4;
  unsigned char* vt = kt + L::kTileBytes;

  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t total = static_cast<int64_t>(p.num_items) * p.kv_heads * subgroups;
  if (w >= total) return;  // whole warp: nothing below synchronises beyond the warp
  const int sg = static_cast<int>(w % subgroups);
  const int g = static_cast<int>((w / subgroups) % p.kv_heads);
  const int64_t item_index = w / (static_cast<int64_t>(subgroups) * p.kv_heads);
  const int rep = p.heads / p.kv_heads;
  const int nh = min(per_subgroup, rep - sg * per_subgroup);  // query heads of this warp
  if (nh <= 0) return;
  const int h0 = g * rep + sg * per_subgroup;
  const PagedWorkItem item = p.items[item_index];

  // The warp's queries, lane-per-channel (c = lane + 32·i), pre-scaled into log2 units.
  float qreg[kPagedMaxRep][kCpl];
  const float qscale = p.scale * kLog2e;
#pragma unroll
  for (int r = 0; r < kPagedMaxRep; ++r) {
#pragma unroll
    for (int i = 0; i < kCpl; ++i) {
      qreg[r][i] =
          r < nh ? p.q[(static_cast<int64_t>(item.seq) * p.heads + h0 + r) * D + lane + 32 * i] *
                       qscale
                 : 0.f;
    }
  }

  float m[kPagedMaxRep], l[kPagedMaxRep], acc[kPagedMaxRep][kCpl];
#pragma unroll
  for (int r = 0; r < kPagedMaxRep; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int i = 0; i < kCpl; ++i) acc[r][i] = 0.f;
  }

  // A tile's K and V are copied asynchronously and used one after the other, so V's copy overlaps
  // the scores on K, and the next tile's K copy overlaps the softmax and P·V on this tile's V.
  PagedSpanDesc desc;
  paged::PagedTile cur = paged::FindTile<D>(p.spans, item.span, item.token, item.num_tokens, desc);
  int remaining = item.num_tokens;
  if (cur.n > 0) paged::IssueKeyTileAsync<D>(desc, cur, p.kv_heads, g, lane, kt, kp);
  CpAsyncCommit();
  int prepared_span = -1;
  bool prepared_dense = false;  // qf holds the plain query, which every dense span scores with
  while (cur.n > 0) {
    const int span = cur.span, tok = cur.tok, n = cur.n;
    const int fmt = desc.format;
    const bool quant = IsQuantized(fmt);
    const int pitch = RowBytes<D>(fmt) + 16;
    paged::IssueRowsAsync<D>(desc.v, fmt, p.kv_heads, g, tok, n, lane, vt);
    CpAsyncCommit();
    paged::ValueParams<D> value_params;  // in flight until after the scores
    value_params.Load(desc, cur, g, lane);
    CpAsyncWait<1>();  // this lane's copies of the tile's K (and key scale/zero) have landed
    __syncwarp();      // and every other lane's

    // Per quantised span: the query with the page's key scale folded in, and q·key zero (keys
    // score as (q ⊙ s)·code + q·z, so codes are never dequantised for the scores). Dense spans
    // score with the plain query, prepared once for a run of them.
    if (span != prepared_span && !(prepared_dense && !quant)) {
      prepared_span = span;
      prepared_dense = !quant;
#pragma unroll
      for (int r = 0; r < kPagedMaxRep; ++r) {
        if (r >= nh) break;  // warp-uniform
        float z = 0.f;
#pragma unroll
        for (int i = 0; i < kCpl; ++i) {
          const int c = lane + 32 * i;
          float qv = qreg[r][i];
          if (quant) {
            z = fmaf(qv, __half2float(kp[D + c]), z);
            qv *= __half2float(kp[c]);
          }
          qf[r * D + c] = qv;
        }
        if (quant) z = WarpSum(z);  // warp-uniform
        if (lane == 0) qz[r] = z;
      }
      __syncwarp();
    }

    // Scores, lane t = token t of the tile; q reads are warp-wide broadcasts.
    float s[kPagedMaxRep];
#pragma unroll
    for (int r = 0; r < kPagedMaxRep; ++r) s[r] = 0.f;
    if (lane < n) {
      const unsigned char* row = kt + lane * pitch;
      if (fmt == static_cast<int>(PagedKvFormat::kF16)) {
#pragma unroll 4
        for (int c0 = 0; c0 < D; c0 += 8) {
          const uint4 raw = *reinterpret_cast<const uint4*>(row + c0 * 2);
          const __half2* h2 = reinterpret_cast<const __half2*>(&raw);
          float x[8];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float2 f = __half22float2(h2[j]);
            x[2 * j] = f.x;
            x[2 * j + 1] = f.y;
          }
#pragma unroll
          for (int r = 0; r < kPagedMaxRep; ++r) {
            if (r < nh) {
              const float4 a = *reinterpret_cast<const float4*>(qf + r * D + c0);
              const float4 b = *reinterpret_cast<const float4*>(qf + r * D + c0 + 4);
              s[r] = fmaf(a.x, x[0], fmaf(a.y, x[1], fmaf(a.z, x[2], fmaf(a.w, x[3], s[r]))));
              s[r] = fmaf(b.x, x[4], fmaf(b.y, x[5], fmaf(b.z, x[6], fmaf(b.w, x[7], s[r]))));
            }
          }
        }
      } else if (fmt == static_cast<int>(PagedKvFormat::kF32)) {
#pragma unroll 4
        for (int c0 = 0; c0 < D; c0 += 4) {
          const float4 x = *reinterpret_cast<const float4*>(row + c0 * 4);
#pragma unroll
          for (int r = 0; r < kPagedMaxRep; ++r) {
            if (r < nh) {
              const float4 a = *reinterpret_cast<const float4*>(qf + r * D + c0);
              s[r] = fmaf(a.x, x.x, fmaf(a.y, x.y, fmaf(a.z, x.z, fmaf(a.w, x.w, s[r]))));
            }
          }
        }
      } else if (fmt == static_cast<int>(PagedKvFormat::kInt4)) {
        // A 32-channel block is 16 bytes: byte j holds channel j (low nibble) and j+16 (high).
#pragma unroll
        for (int blk = 0; blk < D / 32; ++blk) {
          const uint4 raw = *reinterpret_cast<const uint4*>(row + blk * 16);
          const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
          float x[32];
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            const uint32_t byte = (words[j / 4] >> (8 * (j % 4))) & 0xffu;
            x[j] = CodeToFloat(byte & 0x0fu);
            x[j + 16] = CodeToFloat(byte >> 4);
          }
          AccumulateCodeBlock<D>(x, qf, blk, nh, s);
        }
      } else {
        // int2: a block is 8 bytes; byte j holds channels j, j+8, j+16, j+24 (2 bits each).
#pragma unroll
        for (int blk = 0; blk < D / 32; ++blk) {
          const uint2 raw = *reinterpret_cast<const uint2*>(row + blk * 8);
          const uint32_t words[2] = {raw.x, raw.y};
          float x[32];
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const uint32_t byte = (words[j / 4] >> (8 * (j % 4))) & 0xffu;
#pragma unroll
            for (int sft = 0; sft < 4; ++sft)
              x[j + 8 * sft] = CodeToFloat((byte >> (2 * sft)) & 3u);
          }
          AccumulateCodeBlock<D>(x, qf, blk, nh, s);
        }
      }
    }

    value_params.Store(quant, n, lane, vsc, vze);
    __syncwarp();  // every lane is done with the K tile, which the next tile's copy overwrites

    remaining -= n;
    PagedSpanDesc next_desc;
    const paged::PagedTile next = paged::FindTile<D>(p.spans, span, tok + n, remaining, next_desc);
    if (next.n > 0) paged::IssueKeyTileAsync<D>(next_desc, next, p.kv_heads, g, lane, kt, kp);
    CpAsyncCommit();
    CpAsyncWait<1>();  // this tile's V has landed (the next tile's K may be in flight)
    __syncwarp();

    // Online softmax per query head; p goes to shared memory for the P·V pass.
#pragma unroll
    for (int r = 0; r < kPagedMaxRep; ++r) {
      if (r >= nh) break;  // warp-uniform
      const float sr = lane < n ? s[r] + qz[r] : -INFINITY;
      const float m_new = fmaxf(m[r], WarpMax(sr));  // finite: n >= 1
      const float corr = exp2f(m[r] - m_new);        // 0 on the first tile (m = -inf)
      const float pr = lane < n ? exp2f(sr - m_new) : 0.f;
      l[r] = l[r] * corr + WarpSum(pr);
      m[r] = m_new;
#pragma unroll
      for (int i = 0; i < kCpl; ++i) acc[r][i] *= corr;
      ps[r * kTileTokens + lane] = pr;
    }
    __syncwarp();

    // P·V, lane-per-channel (c = lane + 32·i), values dequantised as they are read.
    if (fmt == static_cast<int>(PagedKvFormat::kF16) ||
        fmt == static_cast<int>(PagedKvFormat::kF32)) {
      const bool f16 = fmt == static_cast<int>(PagedKvFormat::kF16);
      for (int t = 0; t < n; ++t) {
        const unsigned char* row = vt + t * pitch;
        float v[kCpl];
#pragma unroll
        for (int i = 0; i < kCpl; ++i) {
          v[i] = f16 ? __half2float(reinterpret_cast<const __half*>(row)[lane + 32 * i])
                     : reinterpret_cast<const float*>(row)[lane + 32 * i];
        }
#pragma unroll
        for (int r = 0; r < kPagedMaxRep; ++r) {
          if (r < nh) {
            const float pr = ps[r * kTileTokens + t];
#pragma unroll
            for (int i = 0; i < kCpl; ++i) acc[r][i] = fmaf(pr, v[i], acc[r][i]);
          }
        }
      }
    } else {
      const bool int4 = fmt == static_cast<int>(PagedKvFormat::kInt4);
      // Where this lane's channel sits in a packed block (ops/kv_quant.h).
      const int byte_in_block = int4 ? (lane & 15) : (lane & 7);
      const int shift = int4 ? (lane < 16 ? 0 : 4) : 2 * (lane >> 3);
      const uint32_t mask = int4 ? 0x0fu : 0x03u;
      const int block_bytes = int4 ? 16 : 8;
      for (int t = 0; t < n; ++t) {
        const unsigned char* row = vt + t * pitch;
        float v[kCpl];
#pragma unroll
        for (int i = 0; i < kCpl; ++i) {
          const uint32_t code = (row[i * block_bytes + byte_in_block] >> shift) & mask;
          v[i] = fmaf(vsc[i * kTileTokens + t], CodeToFloat(code), vze[i * kTileTokens + t]);
        }
#pragma unroll
        for (int r = 0; r < kPagedMaxRep; ++r) {
          if (r < nh) {
            const float pr = ps[r * kTileTokens + t];
#pragma unroll
            for (int i = 0; i < kCpl; ++i) acc[r][i] = fmaf(pr, v[i], acc[r][i]);
          }
        }
      }
    }
    __syncwarp();  // the next tile overwrites the V rows and p

    cur = next;
    desc = next_desc;
  }

  // Partial results of this item for its query heads: output (unnormalised), max, sum.
  float* part_acc = p.workspace;
  float* part_ml = p.workspace + static_cast<size_t>(p.num_items) * p.heads * D;
#pragma unroll
  for (int r = 0; r < kPagedMaxRep; ++r) {
    if (r >= nh) break;
    const size_t slot = static_cast<size_t>(item_index) * p.heads + h0 + r;
#pragma unroll
    for (int i = 0; i < kCpl; ++i) part_acc[slot * D + lane + 32 * i] = acc[r][i];
    if (lane == 0) {
      part_ml[slot * 2] = m[r];
      part_ml[slot * 2 + 1] = l[r];
    }
  }
}

// One block of kCombineWarps warps per (sequence, query head) merges the partials of the
// sequence's items: each warp a contiguous share of them, then warp 0 the warps' results.
// Within a warp the lanes read 32 items' max/sum at once and broadcast each item's weight, so the
// partial outputs are read with many loads in flight: one warp walking 512 items (a 32k context
// at batch 1) one after another took ~130 µs on an H200, more than the attention itself.
constexpr int kCombineWarps = 4;

template <int D>
__global__ void __launch_bounds__(kCombineWarps * 32)
    PagedDecodeCombineKernel(PagedDecodeLaunch p) {
  constexpr int kCpl = D / 32;
  __shared__ float warp_acc[kCombineWarps][D];
  __shared__ float warp_max[kCombineWarps], warp_sum[kCombineWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t pair = blockIdx.x;  // grid: exactly batch × heads blocks
  const int b = static_cast<int>(pair / p.heads), h = static_cast<int>(pair % p.heads);
  const float* part_acc = p.workspace;
  const float* part_ml = p.workspace + static_cast<size_t>(p.num_items) * p.heads * D;
  const int i0 = p.item_offsets[b], i1 = p.item_offsets[b + 1];
  const int share = (i1 - i0 + kCombineWarps - 1) / kCombineWarps;
  const int first = min(i1, i0 + warp * share), last = min(i1, first + share);

  float mx = -INFINITY;
  for (int i = first + lane; i < last; i += 32) {
    mx = fmaxf(mx, part_ml[(static_cast<size_t>(i) * p.heads + h) * 2]);
  }
  mx = WarpMax(mx);
  float sum = 0.f, acc[kCpl];
#pragma unroll
  for (int c = 0; c < kCpl; ++c) acc[c] = 0.f;
  for (int base = first; base < last; base += 32) {
    const int i = base + lane;
    float wgt = 0.f;
    if (i < last) {
      const size_t slot = static_cast<size_t>(i) * p.heads + h;
      wgt = exp2f(part_ml[slot * 2] - mx);
      sum = fmaf(wgt, part_ml[slot * 2 + 1], sum);
    }
    const int n = min(32, last - base);  // warp-uniform
#pragma unroll 8
    for (int k = 0; k < n; ++k) {
      const float wk = __shfl_sync(kFull, wgt, k);
      const float* row = part_acc + (static_cast<size_t>(base + k) * p.heads + h) * D;
#pragma unroll
      for (int c = 0; c < kCpl; ++c) acc[c] = fmaf(wk, row[lane + 32 * c], acc[c]);
    }
  }
  sum = WarpSum(sum);
#pragma unroll
  for (int c = 0; c < kCpl; ++c) warp_acc[warp][lane + 32 * c] = acc[c];
  if (lane == 0) {
    warp_max[warp] = mx;  // -inf for a warp without items
    warp_sum[warp] = sum;
  }
  __syncthreads();
  if (warp != 0) return;
  float m_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) m_all = fmaxf(m_all, warp_max[w]);
  float total = 0.f, out[kCpl];
#pragma unroll
  for (int c = 0; c < kCpl; ++c) out[c] = 0.f;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) {
    const float scale = warp_max[w] == -INFINITY ? 0.f : exp2f(warp_max[w] - m_all);
    total = fmaf(scale, warp_sum[w], total);
#pragma unroll
    for (int c = 0; c < kCpl; ++c) out[c] = fmaf(scale, warp_acc[w][lane + 32 * c], out[c]);
  }
  const float inv = total > 0.f ? 1.f / total : 0.f;  // a sequence with no tokens outputs 0
  float* o = p.out + (static_cast<int64_t>(b) * p.heads + h) * D;
#pragma unroll
  for (int c = 0; c < kCpl; ++c) o[lane + 32 * c] = out[c] * inv;
  if (p.lse != nullptr && lane == 0) {
    // The maxima are in log2 units (scale·log2 e folded into the scores).
    p.lse[static_cast<int64_t>(b) * p.heads + h] =
        total > 0.f ? (m_all + log2f(total)) * 0.69314718055994531f : -INFINITY;
  }
}

// Merges the items' partials (params.workspace) into params.out.
template <int D>
cudaError_t LaunchCombine(const PagedDecodeLaunch& p, cudaStream_t stream) {
  const int64_t pairs = static_cast<int64_t>(p.batch) * p.heads;
  if (pairs > 0x7fffffff) return cudaErrorInvalidValue;
  PagedDecodeCombineKernel<D><<<static_cast<unsigned>(pairs), kCombineWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

template <int D>
cudaError_t Launch(const PagedDecodeLaunch& p, cudaStream_t stream) {
  if constexpr (D == 32) {
    // The tensor-core kernel's fragments span 64 channels at least; head_dim 32 (the shipped
    // tiny model's) runs on the CUDA cores only.
    if (p.tensor_cores) return cudaErrorInvalidValue;
  } else if (p.tensor_cores) {
    const cudaError_t err = paged::LaunchPagedDecodeMmaPartials<D>(p, stream);
    if (err != cudaSuccess) return err;
    return LaunchCombine<D>(p, stream);
  }
  const int rep = p.heads / p.kv_heads;
  const int subgroups = (rep + kPagedMaxRep - 1) / kPagedMaxRep;
  const int per_subgroup = (rep + subgroups - 1) / subgroups;
  const int64_t warps = static_cast<int64_t>(p.num_items) * p.kv_heads * subgroups;
  if (warps > 0) {
    const int64_t blocks = (warps + kWarps - 1) / kWarps;
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
    constexpr int kSmem = kWarps * WarpSmem<D>::kBytes;
    // More than 48 KB of dynamic shared memory needs the opt-in, once per device (a repeated
    // call from a racing thread is harmless).
    static std::atomic<uint64_t> opted_in{0};
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
    if (bit == 0 || (opted_in.load(std::memory_order_relaxed) & bit) == 0) {
      err = cudaFuncSetAttribute(PagedDecodeKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kSmem);
      if (err != cudaSuccess) return err;
      opted_in.fetch_or(bit, std::memory_order_relaxed);
    }
    PagedDecodeKernel<D>
        <<<static_cast<unsigned>(blocks), kWarps * 32, kSmem, stream>>>(p, subgroups, per_subgroup);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return LaunchCombine<D>(p, stream);
}

}  // namespace

size_t PagedDecodeWorkspaceFloats(int32_t num_items, int heads, int head_dim) {
  return static_cast<size_t>(num_items) * heads * (head_dim + 2);
}

void BuildPagedWorkItems(const int32_t* span_tokens, const int32_t* span_offsets, int batch,
                         int32_t tokens_per_item, std::vector<PagedWorkItem>& items,
                         std::vector<int32_t>& item_offsets) {
  items.clear();
  item_offsets.assign(static_cast<size_t>(batch) + 1, 0);
  if (tokens_per_item < 1) tokens_per_item = 1;
  for (int b = 0; b < batch; ++b) {
    item_offsets[b] = static_cast<int32_t>(items.size());
    PagedWorkItem cur;
    bool open = false;
    for (int32_t s = span_offsets[b]; s < span_offsets[b + 1]; ++s) {
      const int32_t n = span_tokens[s];
      int32_t t = 0;
      while (t < n) {
        if (!open) {
          cur = PagedWorkItem{b, s, t, 0};
          open = true;
        }
        const int32_t take = std::min(n - t, tokens_per_item - cur.num_tokens);
        cur.num_tokens += take;
        t += take;
        if (cur.num_tokens == tokens_per_item) {
          items.push_back(cur);
          open = false;
        }
      }
    }
    if (open) items.push_back(cur);
  }
  item_offsets[batch] = static_cast<int32_t>(items.size());
}

int32_t ChoosePagedTokensPerItem(int64_t total_tokens, int kv_heads, int heads, int sm_count) {
  const int rep = kv_heads > 0 ? heads / kv_heads : 1;
  const int subgroups = (rep + kPagedMaxRep - 1) / kPagedMaxRep;
  // About four waves of 16 resident warps per multiprocessor (the CUDA-core kernel's occupancy at
  // head_dim 64), so that the last, partly filled wave costs a quarter of the time at most.
  const int64_t target_warps = static_cast<int64_t>(std::max(sm_count, 1)) * 64;
  const int64_t items = std::max<int64_t>(1, target_warps / std::max(1, kv_heads * subgroups));
  int64_t tpi = (total_tokens + items - 1) / items;
  tpi = (tpi + 31) / 32 * 32;
  return static_cast<int32_t>(std::clamp<int64_t>(tpi, 64, 1 << 30));
}

cudaError_t LaunchPagedDecodeAttention(const PagedDecodeLaunch& params, cudaStream_t stream) {
  if (params.kv_heads <= 0 || params.heads <= 0 || params.heads % params.kv_heads != 0 ||
      params.batch < 0 || params.num_items < 0 || params.item_offsets == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (params.batch == 0) return cudaSuccess;
  switch (params.head_dim) {
    case 32:
      return Launch<32>(params, stream);
    case 64:
      return Launch<64>(params, stream);
    case 128:
      return Launch<128>(params, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace framezip::engine::cuda
