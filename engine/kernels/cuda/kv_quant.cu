#include <cuda_fp16.h>

#include "engine/kernels/cuda/kv_quant.cuh"

namespace framezip::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 32;  // channels per packing block and per value group

// f16 bit patterns, as the CPU's NextUp/NextDown (ops/kv_quant.cc).
__device__ __forceinline__ uint16_t NextUpF16(uint16_t h) {
  if ((h & 0x7fffu) == 0) return 0x0001u;
  return (h & 0x8000u) ? static_cast<uint16_t>(h - 1) : static_cast<uint16_t>(h + 1);
}
__device__ __forceinline__ uint16_t NextDownF16(uint16_t h) {
  return static_cast<uint16_t>(NextUpF16(static_cast<uint16_t>(h ^ 0x8000u)) ^ 0x8000u);
}
__device__ __forceinline__ float F16Bits(uint16_t h) { return __half2float(__ushort_as_half(h)); }

__device__ __forceinline__ uint16_t RoundDownF16(float x) {
  uint16_t h = __half_as_ushort(__float2half_rn(x));
  if (F16Bits(h) > x) h = NextDownF16(h);
  return h;
}
__device__ __forceinline__ uint16_t RoundUpF16(float x) {
  uint16_t h = __half_as_ushort(__float2half_rn(x));
  if (F16Bits(h) < x) h = NextUpF16(h);
  return h;
}

// kvq::ChooseParams: zero = lo rounded down; scale = (hi - zero) / L in f64, to f32 rounded up,
// then to f16 rounded up.
__device__ __forceinline__ void ChooseParams(float lo, float hi, int bits, uint16_t& scale,
                                             uint16_t& zero) {
  zero = RoundDownF16(lo);
  const double want = (static_cast<double>(hi) - static_cast<double>(F16Bits(zero))) /
                      static_cast<double>((1 << bits) - 1);
  float s = __double2float_rn(want);
  if (static_cast<double>(s) < want) s = nextafterf(s, INFINITY);
  // std::max(s, 0.f) exactly: s when !(s < 0), so a -0 scale stays -0 as on the CPU (fmaxf may
  // return either zero).
  scale = RoundUpF16(s < 0.f ? 0.f : s);
}

// kvq::QuantizeOne.
__device__ __forceinline__ uint32_t QuantizeOne(float x, float scale, float zero, int bits) {
  const float levels = static_cast<float>((1 << bits) - 1);
  float c = scale > 0.f ? __fdiv_rn(__fsub_rn(x, zero), scale) : 0.f;
  c = c < 0.f ? 0.f : (c > levels ? levels : c);
  return static_cast<uint32_t>(__fadd_rn(c, 0.5f));
}

// kvq::PackBlock of 32 codes into 16 (4-bit) or 8 (2-bit) bytes at out.
__device__ __forceinline__ void PackBlock(const uint8_t* codes, int bits, uint8_t* out) {
  if (bits == 4) {
#pragma unroll
    for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>(codes[j] | codes[j + 16] << 4);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      out[j] = static_cast<uint8_t>(codes[j] | codes[j + 8] << 2 | codes[j + 16] << 4 |
                                    codes[j + 24] << 6);
    }
  }
}

__global__ void __launch_bounds__(kThreads) QuantizePagesKernel(QuantizePagesLaunch p) {
  extern __shared__ float key_params[];  // [2, C]: scale, zero as f32
  const int C = p.channels, P = p.page_tokens, bits = p.bits;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * P;
  const int n = static_cast<int>(p.num_tokens - t0 < P ? p.num_tokens - t0 : P);
  const size_t row_bytes = static_cast<size_t>(C) * bits / 8;
  const size_t code_rows = static_cast<size_t>(P) * row_bytes;
  uint8_t* base = static_cast<uint8_t*>(p.pages[blockIdx.x]);
  uint8_t* k_codes = base;
  uint16_t* k_scale = reinterpret_cast<uint16_t*>(base + code_rows);
  uint16_t* k_zero = k_scale + C;
  uint8_t* v_codes = reinterpret_cast<uint8_t*>(k_zero + C);
  uint16_t* v_scale = reinterpret_cast<uint16_t*>(v_codes + code_rows);
  uint16_t* v_zero = v_scale + static_cast<size_t>(P) * (C / kGroup);
  const float* k = p.k + t0 * C;
  const float* v = p.v + t0 * C;
  const int groups = C / kGroup;
  const int block_bytes = kGroup * bits / 8;

  // Zero what no token fills: code rows [n, P) of K and V, value parameters of slots [n, P).
  const size_t tail = static_cast<size_t>(P - n) * row_bytes;
  for (size_t i = threadIdx.x; i < tail; i += blockDim.x) {
    k_codes[n * row_bytes + i] = 0;
    v_codes[n * row_bytes + i] = 0;
  }
  for (int i = threadIdx.x; i < groups * (P - n); i += blockDim.x) {
    const int gi = i / (P - n), t = n + i % (P - n);
    v_scale[static_cast<size_t>(gi) * P + t] = 0;
    v_zero[static_cast<size_t>(gi) * P + t] = 0;
  }

  // Keys: per-channel parameters over the page's n tokens (reads coalesced across channels).
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float lo = k[c], hi = k[c];
    for (int t = 1; t < n; ++t) {  // std::min / std::max exactly (signed zeros included)
      const float x = k[static_cast<int64_t>(t) * C + c];
      lo = x < lo ? x : lo;
      hi = hi < x ? x : hi;
    }
    uint16_t s, z;
    ChooseParams(lo, hi, bits, s, z);
    k_scale[c] = s;
    k_zero[c] = z;
    key_params[c] = F16Bits(s);
    key_params[C + c] = F16Bits(z);
  }
  __syncthreads();

  // Key codes: one thread per (token, 32-channel block).
  for (int i = threadIdx.x; i < n * groups; i += blockDim.x) {
    const int t = i / groups, blk = i % groups;
    const float* x = k + static_cast<int64_t>(t) * C + blk * kGroup;
    uint8_t codes[kGroup], packed[16];
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      const int c = blk * kGroup + j;
      codes[j] = static_cast<uint8_t>(QuantizeOne(x[j], key_params[c], key_params[C + c], bits));
    }
    PackBlock(codes, bits, packed);
    uint8_t* out = k_codes + t * row_bytes + static_cast<size_t>(blk) * block_bytes;
    for (int j = 0; j < block_bytes; ++j) out[j] = packed[j];
  }

  // Values: one thread per (token, group): parameters over the group's 32 channels, then codes.
  for (int i = threadIdx.x; i < n * groups; i += blockDim.x) {
    const int t = i / groups, gi = i % groups;
    const float* x = v + static_cast<int64_t>(t) * C + gi * kGroup;
    float lo = x[0], hi = x[0];
#pragma unroll
    for (int j = 1; j < kGroup; ++j) {  // std::minmax_element: first smallest, last largest
      lo = x[j] < lo ? x[j] : lo;
      hi = x[j] < hi ? hi : x[j];
    }
    uint16_t s, z;
    ChooseParams(lo, hi, bits, s, z);
    v_scale[static_cast<size_t>(gi) * P + t] = s;
    v_zero[static_cast<size_t>(gi) * P + t] = z;
    const float sf = F16Bits(s), zf = F16Bits(z);
    uint8_t codes[kGroup], packed[16];
#pragma unroll
    for (int j = 0; j < kGroup; ++j)
      codes[j] = static_cast<uint8_t>(QuantizeOne(x[j], sf, zf, bits));
    PackBlock(codes, bits, packed);
    uint8_t* out = v_codes + t * row_bytes + static_cast<size_t>(gi) * block_bytes;
    for (int j = 0; j < block_bytes; ++j) out[j] = packed[j];
  }
}

}  // namespace

cudaError_t LaunchQuantizePages(const QuantizePagesLaunch& p, cudaStream_t stream) {
  if ((p.bits != 4 && p.bits != 2) || p.channels <= 0 || p.channels % kGroup != 0 ||
      p.channels > 6144 || p.page_tokens <= 0 || p.page_tokens % 8 != 0 || p.num_tokens < 0) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  const int64_t pages = (p.num_tokens + p.page_tokens - 1) / p.page_tokens;
  if (pages > 0x7fffffff) return cudaErrorInvalidValue;
  const size_t smem = 2 * static_cast<size_t>(p.channels) * sizeof(float);
  QuantizePagesKernel<<<static_cast<unsigned>(pages), kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
