#include <cuda_bf16.h>

#include <atomic>
#include <cmath>

#include "engine/kernels/cuda/attention_mma.cuh"
#include "engine/kernels/cuda/cp_async.cuh"
#include "engine/kernels/cuda/mma_fragments.cuh"

namespace framezip::engine::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerBlock = 16 * kWarps;  // queries per block
constexpr int kKeys = 64;                   // keys per tile
constexpr float kLog2e = 1.4426950408889634f;

// Four transposed 8×8 b16 matrices; lane L gives the address of row L % 8 of matrix L / 8 and
// receives, of each matrix M, M[2·(L%4)][L/4] and M[2·(L%4)+1][L/4]: a B fragment of an
// m16n8k16 MMA when the matrix rows are its k (keys) and the columns its n (channels).
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// Four 8×8 b16 matrices as stored; lane L gives the address of row L % 8 of matrix L / 8 and
// receives, of each matrix M, M[L/4][2·(L%4)] and M[L/4][2·(L%4)+1]: a B fragment of an m16n8k16
// MMA when the matrix rows are its n (keys) and the columns its k (channels), as K rows are.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// The first two matrices of LdMatrixX4 (lanes 0-15 give the addresses; the others' are unused):
// the B fragment of one k-step, for a head size whose k-steps are odd in number (80).
__device__ __forceinline__ void LdMatrixX2(uint32_t (&r)[2], const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(s));
}

// The A fragments of this lane's two query rows (row_lo, row_hi) straight from global memory;
// rows past tq are zero (and never written).
template <int kSteps>
__device__ __forceinline__ void LoadQFragments(uint32_t (&qa)[kSteps][4], const __nv_bfloat16* q,
                                               int64_t q_row, int64_t row_lo, int64_t row_hi,
                                               int64_t tq, int tig) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    const int c = kk * 16 + 2 * tig;
    auto ld = [&](int64_t row, int col) -> uint32_t {
      return row < tq ? *reinterpret_cast<const uint32_t*>(q + row * q_row + col) : 0u;
    };
    qa[kk][0] = ld(row_lo, c);
    qa[kk][1] = ld(row_hi, c);
    qa[kk][2] = ld(row_lo, c + 8);
    qa[kk][3] = ld(row_hi, c + 8);
  }
}

// Keys [0, end) can be visible to some query of the block starting at query i0.
__device__ __forceinline__ int64_t VisibleKeyEnd(const AttentionMmaParams& p, int64_t i0) {
  int64_t kend = p.tk;
  if (p.causal) {
    const int64_t last = i0 + kRowsPerBlock - 1 + p.q_offset + 1;
    kend = last < kend ? last : kend;
  }
  return kend;
}

// Whether every key of the tile at j0 is visible to every query of the warp whose first query
// row is `warp_row0` (16 rows): then ScoreTile masks nothing. Warp-uniform.
__device__ __forceinline__ bool TileFullyVisible(const AttentionMmaParams& p, int64_t j0,
                                                 int64_t warp_row0) {
  const int64_t last_key = j0 + kKeys - 1;
  return last_key < p.tk && (!p.causal || last_key <= warp_row0 + p.q_offset);
}

// S = Q·Kᵀ for the kKeys keys of a shared-memory tile (rows kPitch bytes apart, key j0 first),
// 8 blocks of 8 keys, scaled to log2 units; unless `full`, keys past tk or (causal) after the
// query are -inf. K's B fragments come two k-steps at a time through ldmatrix (an odd last one
// alone).
template <int kSteps>
__device__ __forceinline__ void ScoreTile(float (&s)[kKeys / 8][4], const uint32_t (&qa)[kSteps][4],
                                          const unsigned char* tile, int kPitch, int lane,
                                          bool full, int64_t j0, int64_t row_lo, int64_t row_hi,
                                          const AttentionMmaParams& p, float scale) {
  const int tig = lane & 3, mat = lane >> 3;
#pragma unroll
  for (int nb = 0; nb < kKeys / 8; ++nb) {
    s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
    // Matrix m of the x4 load: channels (kk + m/2)·16 + (m%2)·8 of the block's 8 keys.
    const unsigned char* lane_row = tile + (nb * 8 + (lane & 7)) * kPitch + mat * 16;
#pragma unroll
    for (int kk = 0; kk + 1 < kSteps; kk += 2) {
      uint32_t kb[4];
      LdMatrixX4(kb, lane_row + kk * 32);
      MmaBf16(s[nb], qa[kk], kb[0], kb[1]);
      MmaBf16(s[nb], qa[kk + 1], kb[2], kb[3]);
    }
    if constexpr (kSteps % 2 == 1) {
      uint32_t kb[2];
      LdMatrixX2(kb, lane_row + (kSteps - 1) * 32);
      MmaBf16(s[nb], qa[kSteps - 1], kb[0], kb[1]);
    }
    if (full) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nb][e] *= scale;
      continue;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t j = j0 + nb * 8 + 2 * tig + (e & 1);
      const int64_t i = e < 2 ? row_lo : row_hi;
      const bool visible = j < p.tk && (!p.causal || j <= i + p.q_offset);
      s[nb][e] = visible ? s[nb][e] * scale : -INFINITY;
    }
  }
}

// Grid (query blocks, heads, batch). Fragment layouts as in paged_attention_mma.cu
// (gid = lane / 4, tig = lane % 4).
template <int D>
__global__ void __launch_bounds__(kWarps * 32) AttentionMmaKernel(AttentionMmaParams p) {
  constexpr int kSteps = D / 16;           // k-steps of S = Q·Kᵀ
  constexpr int kNb = D / 8;               // n-blocks of O
  constexpr int kKPitch = D * 2 + 16;      // bytes per K row in shared memory
  constexpr int kVPitch = kKeys * 2 + 16;  // bytes per (transposed) V row: one channel's keys
  __shared__ __align__(16) unsigned char ks[kKeys * kKPitch];
  __shared__ __align__(16) unsigned char vts[D * kVPitch];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int h = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int g = h / (p.heads / p.kv_heads);
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int64_t row_lo = i0 + warp * 16 + gid, row_hi = row_lo + 8;  // this lane's two queries
  const int64_t q_row = static_cast<int64_t>(p.heads) * D;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * D;
  const auto* q = static_cast<const __nv_bfloat16*>(p.q) + b * p.tq * q_row + h * D;
  const auto* kg = static_cast<const __nv_bfloat16*>(p.k) + b * p.tk * kv_row + g * D;
  const auto* vg = static_cast<const __nv_bfloat16*>(p.v) + b * p.tk * kv_row + g * D;

  uint32_t qa[kSteps][4];
  LoadQFragments<kSteps>(qa, q, q_row, row_lo, row_hi, p.tq, tig);
  const int64_t kend = VisibleKeyEnd(p, i0);
  const float scale = p.scale * kLog2e;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[kNb][4];
#pragma unroll
  for (int nb = 0; nb < kNb; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.f;

  for (int64_t j0 = 0; j0 < kend; j0 += kKeys) {
    __syncthreads();  // everyone is done with the previous tile
    // K tile: 16-byte copies; V tile: transposed to [channel][key], still bf16 (an f16 copy
    // would hold 3 more mantissa bits but overflow above 65504, which bf16 activations reach).
    constexpr int kChunks = kKeys * D / 8;  // 8 elements per chunk
    for (int idx = threadIdx.x; idx < kChunks; idx += blockDim.x) {
      const int key = idx / (D / 8), c8 = (idx % (D / 8)) * 8;
      const int64_t j = j0 + key;
      uint4 kraw = make_uint4(0, 0, 0, 0), vraw = make_uint4(0, 0, 0, 0);
      if (j < p.tk) {
        kraw = *reinterpret_cast<const uint4*>(kg + j * kv_row + c8);
        vraw = *reinterpret_cast<const uint4*>(vg + j * kv_row + c8);
      }
      *reinterpret_cast<uint4*>(ks + key * kKPitch + c8 * 2) = kraw;
      const __nv_bfloat16* vb = reinterpret_cast<const __nv_bfloat16*>(&vraw);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        reinterpret_cast<__nv_bfloat16*>(vts + (c8 + e) * kVPitch)[key] = vb[e];
      }
    }
    __syncthreads();

    float s[kKeys / 8][4];
    ScoreTile<kSteps>(s, qa, ks, kKPitch, lane, TileFullyVisible(p, j0, i0 + warp * 16), j0, row_lo,
                      row_hi, p, scale);
    OnlineSoftmaxTile<kKeys / 8, kNb>(s, m, l, o);

    // O += P·V in bf16 (as FlashAttention-2 for bf16 inputs), 4 k-steps of 16 keys; P's A
    // fragments come from S's C fragments.
#pragma unroll
    for (int kst = 0; kst < kKeys / 16; ++kst) {
      const uint32_t pa[4] = {PackBf162(s[2 * kst][0], s[2 * kst][1]),
                              PackBf162(s[2 * kst][2], s[2 * kst][3]),
                              PackBf162(s[2 * kst + 1][0], s[2 * kst + 1][1]),
                              PackBf162(s[2 * kst + 1][2], s[2 * kst + 1][3])};
      const int key = kst * 16 + 2 * tig;
#pragma unroll
      for (int nb = 0; nb < kNb; ++nb) {
        const unsigned char* vrow = vts + (nb * 8 + gid) * kVPitch;
        MmaBf16(o[nb], pa, *reinterpret_cast<const uint32_t*>(vrow + key * 2),
                *reinterpret_cast<const uint32_t*>(vrow + (key + 8) * 2));
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = r == 0 ? row_lo : row_hi;
    if (i >= p.tq) continue;
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    float* out = p.out + (b * p.tq + i) * q_row + static_cast<int64_t>(h) * D;
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) {
      *reinterpret_cast<float2*>(out + nb * 8 + 2 * tig) =
          make_float2(o[nb][2 * r] * inv, o[nb][2 * r + 1] * inv);
    }
  }
}

// Blocks an SM should hold: the registers cap (128 a thread at head_dim 64) that keeps 4 resident.
template <int D>
inline constexpr int kPipelinedMinBlocks = D <= 64 ? 4 : 2;

// The pipelined variant (params.pipelined): K and V tiles copied row-major with cp.async into
// two shared-memory stages (tile t+1 loads while tile t computes), V's B fragments through
// ldmatrix.trans, P·V in bf16 as the default variant.
template <int D>
__global__ void __launch_bounds__(kWarps * 32, kPipelinedMinBlocks<D>)
    AttentionMmaPipelinedKernel(AttentionMmaParams p) {
  constexpr int kSteps = D / 16;
  constexpr int kNb = D / 8;
  constexpr int kPitch = D * 2 + 16;  // bytes per K or V row in shared memory
  constexpr int kTileBytes = kKeys * kPitch;
  extern __shared__ __align__(16) unsigned char smem[];  // [2 stages][K tile | V tile]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int h = blockIdx.y;
  const int64_t b = blockIdx.z;
  const int g = h / (p.heads / p.kv_heads);
  // Causal blocks of later queries see more keys: they are started first, so the short ones
  // fill the tail of the grid instead of one long block running alone at the end.
  const int64_t i0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRowsPerBlock;
  const int64_t row_lo = i0 + warp * 16 + gid, row_hi = row_lo + 8;
  const int64_t q_row = static_cast<int64_t>(p.heads) * D;
  const int64_t kv_row = static_cast<int64_t>(p.kv_heads) * D;
  const auto* q = static_cast<const __nv_bfloat16*>(p.q) + b * p.tq * q_row + h * D;
  const auto* kg = static_cast<const __nv_bfloat16*>(p.k) + b * p.tk * kv_row + g * D;
  const auto* vg = static_cast<const __nv_bfloat16*>(p.v) + b * p.tk * kv_row + g * D;

  uint32_t qa[kSteps][4];
  LoadQFragments<kSteps>(qa, q, q_row, row_lo, row_hi, p.tq, tig);
  const int64_t kend = VisibleKeyEnd(p, i0);
  const int64_t tiles = (kend + kKeys - 1) / kKeys;
  const float scale = p.scale * kLog2e;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[kNb][4];
#pragma unroll
  for (int nb = 0; nb < kNb; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.f;

  // Issues the copies of tile `t` into stage `stage` as one cp.async group (keys past tk: zeros).
  auto load = [&](int64_t t, int stage) {
    unsigned char* kd = smem + stage * 2 * kTileBytes;
    unsigned char* vd = kd + kTileBytes;
    for (int idx = threadIdx.x; idx < kKeys * D / 8; idx += blockDim.x) {
      const int key = idx / (D / 8), c8 = (idx % (D / 8)) * 8;
      const int64_t j = t * kKeys + key;
      const bool in = j < p.tk;
      CpAsync16(kd + key * kPitch + c8 * 2, in ? kg + j * kv_row + c8 : kg, in ? 16 : 0);
      CpAsync16(vd + key * kPitch + c8 * 2, in ? vg + j * kv_row + c8 : vg, in ? 16 : 0);
    }
    CpAsyncCommit();
  };
  if (tiles > 0) load(0, 0);

  for (int64_t t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) {
      load(t + 1, static_cast<int>((t + 1) & 1));  // that stage was freed by the last barrier
      CpAsyncWait<1>();                            // tile t's group has landed
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();  // everyone's copies of tile t are visible
    const unsigned char* kt = smem + (t & 1) * 2 * kTileBytes;
    const unsigned char* vt = kt + kTileBytes;
    const int64_t j0 = t * kKeys;

    float s[kKeys / 8][4];
    ScoreTile<kSteps>(s, qa, kt, kPitch, lane, TileFullyVisible(p, j0, i0 + warp * 16), j0, row_lo,
                      row_hi, p, scale);
    OnlineSoftmaxTile<kKeys / 8, kNb>(s, m, l, o);

    // O += P·V: per 16 keys, ldmatrix.trans gives the B fragments of two 8-channel blocks.
    const int mat = lane >> 3, mrow = lane & 7;
#pragma unroll
    for (int kst = 0; kst < kKeys / 16; ++kst) {
      const uint32_t pa[4] = {PackBf162(s[2 * kst][0], s[2 * kst][1]),
                              PackBf162(s[2 * kst][2], s[2 * kst][3]),
                              PackBf162(s[2 * kst + 1][0], s[2 * kst + 1][1]),
                              PackBf162(s[2 * kst + 1][2], s[2 * kst + 1][3])};
      const int key = kst * 16 + (mat & 1) * 8 + mrow;
#pragma unroll
      for (int nb = 0; nb < kNb; nb += 2) {
        uint32_t bv[4];
        LdMatrixX4Trans(bv, vt + key * kPitch + (nb * 8 + (mat >> 1) * 8) * 2);
        MmaBf16(o[nb], pa, bv[0], bv[1]);
        MmaBf16(o[nb + 1], pa, bv[2], bv[3]);
      }
    }
    __syncthreads();  // stage t & 1 is refilled next iteration (with tile t + 2)
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = r == 0 ? row_lo : row_hi;
    if (i >= p.tq) continue;
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    float* out = p.out + (b * p.tq + i) * q_row + static_cast<int64_t>(h) * D;
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) {
      *reinterpret_cast<float2*>(out + nb * 8 + 2 * tig) =
          make_float2(o[nb][2 * r] * inv, o[nb][2 * r + 1] * inv);
    }
  }
}

template <int D>
cudaError_t LaunchPipelined(const AttentionMmaParams& p, const dim3& grid, cudaStream_t stream) {
  constexpr int kSmem = 2 * 2 * kKeys * (D * 2 + 16);
  static std::atomic<uint64_t> opted_in{0};  // the > 48 KB opt-in, once per device
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (opted_in.load(std::memory_order_relaxed) & bit) == 0) {
    err = cudaFuncSetAttribute(AttentionMmaPipelinedKernel<D>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return err;
    opted_in.fetch_or(bit, std::memory_order_relaxed);
  }
  AttentionMmaPipelinedKernel<D><<<grid, kWarps * 32, kSmem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchAttentionMma(const AttentionMmaParams& p, cudaStream_t stream) {
  if ((p.head_dim != 64 && p.head_dim != 80 && p.head_dim != 128) || p.kv_heads <= 0 ||
      p.heads % p.kv_heads != 0 ||
      p.heads > 65535 || p.batch > 65535) {
    return cudaErrorInvalidValue;
  }
  // k and v are read in 16-byte pieces (uint4 loads, cp.async), q in pairs, out written in pairs:
  // a misaligned view would fault inside the kernel, so refuse it here.
  const auto misaligned = [](const void* ptr, uintptr_t bytes) {
    return (reinterpret_cast<uintptr_t>(ptr) & (bytes - 1)) != 0;
  };
  if (misaligned(p.k, 16) || misaligned(p.v, 16) || misaligned(p.q, 4) || misaligned(p.out, 8)) {
    return cudaErrorInvalidValue;
  }
  if (p.batch == 0 || p.tq == 0 || p.heads == 0) return cudaSuccess;
  const int64_t blocks = (p.tq + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(p.batch));
  if (p.pipelined) {
    switch (p.head_dim) {
      case 64:
        return LaunchPipelined<64>(p, grid, stream);
      case 80:
        return LaunchPipelined<80>(p, grid, stream);
      default:
        return LaunchPipelined<128>(p, grid, stream);
    }
  }
  switch (p.head_dim) {
    case 64:
      AttentionMmaKernel<64><<<grid, kWarps * 32, 0, stream>>>(p);
      break;
    case 80:
      AttentionMmaKernel<80><<<grid, kWarps * 32, 0, stream>>>(p);
      break;
    default:
      AttentionMmaKernel<128><<<grid, kWarps * 32, 0, stream>>>(p);
      break;
  }
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
