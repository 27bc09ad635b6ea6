#include "engine/ops/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/ops/cpu_kernels.h"

namespace framezip::engine::ops::kvq {
namespace {

// The next f16 above h (h finite).
Float16 NextUp(Float16 h) {
  if ((h.bits & 0x7fffu) == 0) return Float16{0x0001};  // ±0 -> smallest subnormal
  return Float16{static_cast<uint16_t>((h.bits & 0x8000u) ? h.bits - 1 : h.bits + 1)};
}
Float16 NextDown(Float16 h) {
  const Float16 up = NextUp(Float16{static_cast<uint16_t>(h.bits ^ 0x8000u)});
  return Float16{static_cast<uint16_t>(up.bits ^ 0x8000u)};
}

Float16 RoundDownF16(float x) {
  Float16 h = F32ToF16(x);
  if (F16ToF32(h) > x) h = NextDown(h);
  return h;
}
Float16 RoundUpF16(float x) {
  Float16 h = F32ToF16(x);
  if (F16ToF32(h) < x) h = NextUp(h);
  return h;
}

}  // namespace

void PackBlock(const uint8_t* codes, int bits, uint8_t* out) {
  if (bits == 4) {
    for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>(codes[j] | codes[j + 16] << 4);
  } else {
    for (int j = 0; j < 8; ++j) {
      out[j] = static_cast<uint8_t>(codes[j] | codes[j + 8] << 2 | codes[j + 16] << 4 |
                                    codes[j + 24] << 6);
    }
  }
}

void UnpackBlock(const uint8_t* in, int bits, uint8_t* codes) {
  if (bits == 4) {
    for (int j = 0; j < 16; ++j) {
      codes[j] = in[j] & 0x0f;
      codes[j + 16] = in[j] >> 4;
    }
  } else {
    for (int j = 0; j < 8; ++j) {
      for (int s = 0; s < 4; ++s) codes[j + 8 * s] = (in[j] >> (2 * s)) & 0x03;
    }
  }
}

QuantParams ChooseParams(float lo, float hi, int bits) {
  QuantParams p;
  p.zero = RoundDownF16(lo);
  const double want = (static_cast<double>(hi) - F16ToF32(p.zero)) / ((1 << bits) - 1);
  float s = static_cast<float>(want);
  if (s < want) s = std::nextafter(s, std::numeric_limits<float>::infinity());
  p.scale = RoundUpF16(std::max(s, 0.f));
  return p;
}

void QuantizeKeys(const float* x, int64_t n, int64_t channels, int bits, uint8_t* codes,
                  Float16* scale, Float16* zero) {
  // Each channel's range over the n tokens, row by row so that the loop runs along memory.
  std::vector<float> lo(x, x + channels), hi(x, x + channels);
  for (int64_t t = 1; t < n; ++t) {
    const float* row = x + t * channels;
    for (int64_t c = 0; c < channels; ++c) {
      lo[c] = std::min(lo[c], row[c]);
      hi[c] = std::max(hi[c], row[c]);
    }
  }
  std::vector<float> s(static_cast<size_t>(channels)), z(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const QuantParams p = ChooseParams(lo[c], hi[c], bits);
    scale[c] = p.scale;
    zero[c] = p.zero;
    s[c] = F16ToF32(p.scale);
    z[c] = F16ToF32(p.zero);
  }
  const size_t row_bytes = CodeRowBytes(channels, bits);
  std::vector<uint8_t> row_codes(static_cast<size_t>(channels));
  for (int64_t t = 0; t < n; ++t) {
    cpu::QuantizeCodes(x + t * channels, s.data(), z.data(), 1, channels, bits, row_codes.data());
    for (int64_t c0 = 0; c0 < channels; c0 += kQuantGroup) {
      PackBlock(row_codes.data() + c0, bits, codes + t * row_bytes + CodeRowBytes(c0, bits));
    }
  }
}

void QuantizeValues(const float* x, int64_t n, int64_t channels, int bits, uint8_t* codes,
                    Float16* scale, Float16* zero, int64_t param_stride) {
  const int64_t groups = channels / kQuantGroup;
  const size_t row_bytes = CodeRowBytes(channels, bits);
  uint8_t block[kQuantGroup];
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t gi = 0; gi < groups; ++gi) {
      const float* xs = x + t * channels + gi * kQuantGroup;
      const auto [lo, hi] = std::minmax_element(xs, xs + kQuantGroup);
      const QuantParams p = ChooseParams(*lo, *hi, bits);
      scale[gi * param_stride + t] = p.scale;
      zero[gi * param_stride + t] = p.zero;
      const float s = F16ToF32(p.scale), z = F16ToF32(p.zero);
      cpu::QuantizeCodes(xs, &s, &z, 0, kQuantGroup, bits, block);
      PackBlock(block, bits, codes + t * row_bytes + CodeRowBytes(gi * kQuantGroup, bits));
    }
  }
}

void DequantizeKeys(const uint8_t* codes, const Float16* scale, const Float16* zero, int64_t n,
                    int64_t channels, int bits, float* x) {
  const size_t row_bytes = CodeRowBytes(channels, bits);
  // The per-channel parameters are shared by every row: convert them once.
  std::vector<float> s(static_cast<size_t>(channels)), z(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    s[c] = F16ToF32(scale[c]);
    z[c] = F16ToF32(zero[c]);
  }
  uint8_t block[kQuantGroup];
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c0 = 0; c0 < channels; c0 += kQuantGroup) {
      UnpackBlock(codes + t * row_bytes + CodeRowBytes(c0, bits), bits, block);
      for (int j = 0; j < kQuantGroup; ++j) {
        x[t * channels + c0 + j] = s[c0 + j] * static_cast<float>(block[j]) + z[c0 + j];
      }
    }
  }
}

void DequantizeValues(const uint8_t* codes, const Float16* scale, const Float16* zero, int64_t n,
                      int64_t channels, int bits, int64_t param_stride, float* x) {
  const int64_t groups = channels / kQuantGroup;
  const size_t row_bytes = CodeRowBytes(channels, bits);
  uint8_t block[kQuantGroup];
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t gi = 0; gi < groups; ++gi) {
      UnpackBlock(codes + t * row_bytes + CodeRowBytes(gi * kQuantGroup, bits), bits, block);
      const float s = F16ToF32(scale[gi * param_stride + t]);
      const float z = F16ToF32(zero[gi * param_stride + t]);
      for (int j = 0; j < kQuantGroup; ++j) {
        x[t * channels + gi * kQuantGroup + j] = s * static_cast<float>(block[j]) + z;
      }
    }
  }
}

}  // namespace framezip::engine::ops::kvq
