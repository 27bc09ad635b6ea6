#include "engine/kernels/cuda/gather_spans.cuh"

namespace framezip::engine::cuda {
namespace {

// Code `c` of a packed row (kv_quant.h's block layout: 4-bit byte j = code[j] | code[j+16] << 4;
// 2-bit byte j = code[j] | code[j+8] << 2 | code[j+16] << 4 | code[j+24] << 6).
__device__ __forceinline__ float CodeAt(const uint8_t* row, int64_t c, int bits) {
  const int64_t c0 = c & ~int64_t{31};
  const int j = static_cast<int>(c & 31);
  const uint8_t* block = row + c0 * bits / 8;
  if (bits == 4) return static_cast<float>((block[j & 15] >> (j >= 16 ? 4 : 0)) & 0xF);
  return static_cast<float>((block[j & 7] >> (2 * (j >> 3))) & 0x3);
}

// x̂ = scale · code + zero, rounded as the host's two f32 operations (no fused multiply-add), so
// every device reads the same values.
__device__ __forceinline__ float Dequant(float code, __half scale, __half zero) {
  return __fadd_rn(__fmul_rn(__half2float(scale), code), __half2float(zero));
}

__device__ __forceinline__ float Load(const GatherSpanDesc& s, bool key, int64_t t, int64_t c,
                                      int64_t channels) {
  const void* base = key ? s.k : s.v;
  switch (s.format) {
    case 0:
      return static_cast<const float*>(base)[t * channels + c];
    case 1:
      return __half2float(static_cast<const __half*>(base)[t * channels + c]);
    default: {
      const int bits = s.format == 2 ? 4 : 2;
      const float code =
          CodeAt(static_cast<const uint8_t*>(base) + t * (channels * bits / 8), c, bits);
      if (key) return Dequant(code, s.k_scale[c], s.k_zero[c]);
      const int64_t p = (c / 32) * s.v_param_stride + t;
      return Dequant(code, s.v_scale[p], s.v_zero[p]);
    }
  }
}

__global__ void GatherSpansKernel(GatherSpansParams p) {
  const GatherSpanDesc s = p.spans[blockIdx.x];
  for (int64_t t = blockIdx.y; t < s.num_tokens; t += gridDim.y) {
    const int64_t out = (s.dst_row + t) * p.channels;
    for (int64_t c = threadIdx.x; c < p.channels; c += blockDim.x) {
      if (p.k != nullptr) p.k[out + c] = Load(s, true, t, c, p.channels);
      if (p.v != nullptr) p.v[out + c] = Load(s, false, t, c, p.channels);
    }
  }
}

}  // namespace

cudaError_t LaunchGatherSpans(const GatherSpansParams& params, cudaStream_t stream) {
  if (params.count == 0 || params.channels == 0) return cudaSuccess;
  if (params.count < 0 || params.count > kMaxGatherSpans) return cudaErrorInvalidValue;
  int32_t most = 0;
  for (int i = 0; i < params.count; ++i) {
    if (params.spans[i].format < 0 || params.spans[i].format > 3) return cudaErrorInvalidValue;
    most = params.spans[i].num_tokens > most ? params.spans[i].num_tokens : most;
  }
  if (most == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(params.count),
                  static_cast<unsigned>(most < 64 ? most : 64));
  GatherSpansKernel<<<grid, 128, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace framezip::engine::cuda
