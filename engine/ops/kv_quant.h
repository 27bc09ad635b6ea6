// KIVI-style KV quantisation (docs/methods.md §4.2): the arithmetic and the code packing shared by the
// KV pages (engine/kv/quant_page.h writes them) and decode attention (which dequantises on the
// fly).
//
// Asymmetric min/max quantisation with b bits (b = 4 or 2, L = 2^b - 1 levels):
//   code = clamp(round((x - zero) / scale), 0, L),   x̂ = scale · code + zero
// Keys are quantised per channel (one scale/zero per channel over a page's tokens: key outliers
// sit in fixed channels); values per token in groups of kQuantGroup channels.
//
// Scale and zero are stored as f16 (KIVI does too). So that the stored pair still covers the
// range, zero is min rounded DOWN to f16 and scale is (max - zero) / L rounded UP; every x in
// [min, max] then satisfies |x - x̂| <= scale / 2 (scale = the stored f16 value), up to f32
// rounding of the dequantisation (a few ulp of |x|). Inputs must be finite and within f16 range.
//
// Packing: a row of C channels (C a multiple of 32) is packed in blocks of 32 codes, in channel
// order; block bytes are laid out so that AVX2 unpacks them with a few shifts and masks:
//   4-bit: 16 bytes, byte j = code[j] | code[j + 16] << 4                      (j < 16)
//   2-bit:  8 bytes, byte j = code[j] | code[j+8] << 2 | code[j+16] << 4 | code[j+24] << 6  (j < 8)
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/core/half.h"

namespace framezip::engine::ops::kvq {

// Channels per packing block and per value quantisation group.
inline constexpr int kQuantGroup = 32;

// Bytes of one packed row of `channels` codes (channels % 32 == 0).
constexpr size_t CodeRowBytes(int64_t channels, int bits) {
  return static_cast<size_t>(channels) * static_cast<size_t>(bits) / 8;
}

// Packs / unpacks one block of 32 codes (each < 2^bits) — the layout above.
void PackBlock(const uint8_t* codes, int bits, uint8_t* out);
void UnpackBlock(const uint8_t* in, int bits, uint8_t* codes);

// The stored f16 scale and zero for values in [lo, hi] (see the header comment for the rounding).
struct QuantParams {
  Float16 scale;
  Float16 zero;
};
QuantParams ChooseParams(float lo, float hi, int bits);

// The code of x under (scale, zero), both already f32 from the stored f16.
inline uint8_t QuantizeOne(float x, float scale, float zero, int bits) {
  const float levels = static_cast<float>((1 << bits) - 1);
  float c = scale > 0 ? (x - zero) / scale : 0.f;
  c = c < 0 ? 0 : (c > levels ? levels : c);
  return static_cast<uint8_t>(c + 0.5f);
}

// Keys, per channel over n tokens: x [n, C] f32 -> codes (n rows of CodeRowBytes(C, bits)),
// scale [C], zero [C].
void QuantizeKeys(const float* x, int64_t n, int64_t channels, int bits, uint8_t* codes,
                  Float16* scale, Float16* zero);

// Values, per token in groups of 32 channels: x [n, C] f32 -> codes (n rows), scale and zero
// [C/32, param_stride] (group-major: a group's parameters for consecutive tokens are adjacent, so
// attention loads eight of them at once; param_stride >= n, the page's slot count).
void QuantizeValues(const float* x, int64_t n, int64_t channels, int bits, uint8_t* codes,
                    Float16* scale, Float16* zero, int64_t param_stride);

// The inverse maps (portable scalar reference; attention has its own fused loops).
void DequantizeKeys(const uint8_t* codes, const Float16* scale, const Float16* zero, int64_t n,
                    int64_t channels, int bits, float* x);
void DequantizeValues(const uint8_t* codes, const Float16* scale, const Float16* zero, int64_t n,
                      int64_t channels, int bits, int64_t param_stride, float* x);

}  // namespace framezip::engine::ops::kvq
