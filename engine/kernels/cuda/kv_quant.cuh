// Quantise-and-pack of KIVI int4/int2 KV pages on the GPU, bit-identical to the CPU writer
// (engine/kv/quant_page.cc over ops/kv_quant.h): same f16 parameter rounding (zero = min rounded
// down, scale = (max - zero)/L rounded up, via f64), same code rounding, same block packing, same
// byte layout with P = page_tokens, C = channels = G·d, R = C·bits/8:
//   codes K [P × R] | k_scale [C] f16 | k_zero [C] f16 | codes V [P × R] |
//   v_scale [C/32, P] f16 | v_zero [C/32, P] f16
// and every byte past the filled tokens zero (the page is written whole).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace framezip::engine::cuda {

// Bytes of one quantised page (the layout above).
constexpr size_t QuantPageBytes(int channels, int page_tokens, int bits) {
  const size_t c = static_cast<size_t>(channels), p = static_cast<size_t>(page_tokens);
  const size_t codes = p * c * static_cast<size_t>(bits) / 8;
  return 2 * codes + 2 * c * 2 + 2 * p * (c / 32) * 2;
}

struct QuantizePagesLaunch {
  const float* k = nullptr;  // [num_tokens, channels] f32 (token-major [n, G, d])
  const float* v = nullptr;  // [num_tokens, channels]
  int64_t num_tokens = 0;
  int channels = 0;     // multiple of 32, at most 6144 (shared memory: 8 bytes each)
  int page_tokens = 0;  // multiple of 8
  int bits = 4;         // 4 or 2
  // Device array of ceil(num_tokens / page_tokens) page pointers: page i receives tokens
  // [i·P, min((i+1)·P, n)). Each page is QuantPageBytes(...) bytes.
  void* const* pages = nullptr;
};

// One block per page. Never allocates; cudaErrorInvalidValue for a bad shape.
cudaError_t LaunchQuantizePages(const QuantizePagesLaunch& params, cudaStream_t stream);

}  // namespace framezip::engine::cuda
