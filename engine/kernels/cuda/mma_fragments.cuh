// Warp-level tensor-core pieces shared by the flash-attention-style kernels (attention_mma.cu,
// paged_attention_mma.cu): f16/bf16 packing, the m16n8k16 MMAs, and the online-softmax update of
// one tile of scores held in C fragments. Include only from .cu files.
//
// Fragment layouts (PTX ISA, mma.m16n8k16): gid = lane / 4, tig = lane % 4; C holds rows gid
// ("lo", elements 0-1) and gid + 8 ("hi", elements 2-3), columns 2tig and 2tig + 1 of each 8-wide
// block, so a row's scores are spread over the 4 lanes of its quad.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace framezip::engine::cuda {

__device__ __forceinline__ uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);  // .x (low 16 bits) = lo
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ uint32_t PackBf162(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
  return *reinterpret_cast<const uint32_t*>(&h);
}

// d += a·b, f16 operands, f32 accumulation.
__device__ __forceinline__ void MmaF16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a·b, bf16 operands, f32 accumulation.
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Online softmax over one tile of kKeyBlocks·8 scores (log2 units, -inf where masked) for this
// lane's rows lo (r = 0) and hi (r = 1): S becomes P = 2^(s − m_new), and the running max m, sum l
// and the output accumulator o (kNb 8-wide blocks) are rescaled. A row that has seen no visible
// key yet (m_new = -inf) keeps everything at zero.
template <int kKeyBlocks, int kNb>
__device__ __forceinline__ void OnlineSoftmaxTile(float (&s)[kKeyBlocks][4], float (&m)[2],
                                                  float (&l)[2], float (&o)[kNb][4]) {
  constexpr unsigned kQuadMask = 0xffffffffu;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(kQuadMask, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kQuadMask, mx, 2));
    const float m_new = fmaxf(m[r], mx);
    const float corr = m_new == -INFINITY ? 1.f : exp2f(m[r] - m_new);
    float sum = 0.f;
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; ++nb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pe = m_new == -INFINITY ? 0.f : exp2f(s[nb][2 * r + e] - m_new);
        s[nb][2 * r + e] = pe;
        sum += pe;
      }
    }
    sum += __shfl_xor_sync(kQuadMask, sum, 1);
    sum += __shfl_xor_sync(kQuadMask, sum, 2);
    l[r] = l[r] * corr + sum;
    m[r] = m_new;
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) {
      o[nb][2 * r] *= corr;
      o[nb][2 * r + 1] *= corr;
    }
  }
}

}  // namespace framezip::engine::cuda
