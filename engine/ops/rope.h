// Rotary position embedding, HF "default" and "llama3" rope types, half-split (NeoX/rotate_half)
// layout — not interleaved pairs:
//   inv_freq[i] = 1 / theta^(2i/d)            i in [0, d/2), computed in f32 as HF does
//   f = float(pos) · inv_freq[i] (f32),  c = cos(f), s = sin(f)
//   x'[i]       = x[i] · c − x[i + d/2] · s
//   x'[i + d/2] = x[i + d/2] · c + x[i] · s
// Applied in place to q or k laid out [T, num_heads, head_dim] (token-major, as Linear produces
// them), token t at position positions[t]. Keys are rotated before they are written to the KV
// cache, so cached keys are post-RoPE and decode attention needs no positions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"

namespace framezip::engine::ops {

struct RopeParams {
  int head_dim = 0;      // d, even
  double theta = 10000;  // rope_theta
  // rope_type "llama3" (Llama-3.1+): rescales inv_freq by wavelength band. Off when factor == 0.
  double llama3_factor = 0;
  double llama3_low_freq_factor = 1;
  double llama3_high_freq_factor = 4;
  double llama3_original_max_positions = 8192;
  bool operator==(const RopeParams&) const = default;
};

// The d/2 inverse frequencies of `params`, in f32 exactly as HF computes them.
std::vector<float> RopeInverseFrequencies(const RopeParams& params);

// Host rows x [rows, heads, d] f32 rotated in place at positions[rows] (>= 0), by the angles
// ApplyRope uses (sign +1) or by their negatives (sign -1: RoPE undone, e.g. keys back to
// pre-RoPE for AttentionPack). What the CPU backend of ApplyRope runs.
void RotateHalfSplitRows(float* x, int64_t rows, int64_t heads, int64_t d, const int32_t* positions,
                         const RopeParams& params, float sign = 1.f);

// x [T, H, d] f32, rotated in place; positions [T] i32 (>= 0).
// Errors: INVALID_ARGUMENT when d is odd or differs from params.head_dim, on shape/dtype
// mismatch or a negative position; x and positions on one device (on a GPU, head_dim <= 512 and
// the positions are copied to the host to be checked); UNIMPLEMENTED/UNAVAILABLE as for every op.
Status ApplyRope(Tensor& x, const Tensor& positions, const RopeParams& params);

// The same, for a caller that made `positions` from host values: `host_positions` ([T], equal to
// `positions`) is checked instead, so on a GPU no copy comes back — that round trip drains the
// stream twice per layer in a decode step (llm::Decoder on a GPU).
Status ApplyRope(Tensor& x, const Tensor& positions, const RopeParams& params,
                 std::span<const int32_t> host_positions);

// The fused projection's output split and rotated in one pass: qkv [T, (Hq + 2·Hkv)·d] holds each
// token's q, k and v side by side (one GEMM over the concatenated q/k/v weights); writes
// q [T, Hq, d] and k [T, Hkv, d] rotated at `positions` as ApplyRope does (the same angles, bit for
// bit), and v [T, Hkv, d] copied. On a GPU one launch where a separate q, k and v need two
// rotations (and three GEMMs). host_positions as for ApplyRope (empty: read from `positions` on the
// CPU, copied back on a GPU). Errors as ApplyRope's, and INVALID_ARGUMENT naming the tensor whose
// shape does not match.
Status RopeSplitQkv(const Tensor& qkv, const Tensor& positions, const RopeParams& params,
                    std::span<const int32_t> host_positions, Tensor& q, Tensor& k, Tensor& v);

}  // namespace framezip::engine::ops
