// RopeTable: cos and sin of every RoPE angle float(pos)·inv_freq[i] for positions [0, P), computed
// once per RoPE and shared by every layer and call (vLLM's cos_sin_cache). Without it each layer
// recomputed the same angles for q and again for k: 2·layers·d/2 sines and cosines per token, 5 %
// of the tiny model's prefill.
//
// Values are exactly those ApplyRope computed per call (the f32 product as HF forms it, cos/sin in
// double rounded to f32), so using the table changes no bit.
//
// Thread-safety: For() is safe to call concurrently (a table is built outside the lock, so two
// first calls may both build one); a table is immutable once returned.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/ops/rope.h"

namespace framezip::engine::ops {

class RopeTable {
 public:
  // A table of at least `positions` positions for `rope`, or nullptr when that would pass
  // kMaxBytes, when kMaxRopes others exist, or when `rope`'s frequencies are not finite (the
  // caller then computes its angles itself). Grows by doubling.
  static std::shared_ptr<const RopeTable> For(const RopeParams& rope, int64_t positions);

  int64_t positions() const { return positions_; }
  const float* cos(int32_t pos) const { return cos_.data() + static_cast<size_t>(pos) * half_; }
  const float* sin(int32_t pos) const { return sin_.data() + static_cast<size_t>(pos) * half_; }

  static constexpr size_t kMaxBytes = size_t{64} << 20;
  // Distinct RoPEs kept (a process serves one model, or a few): tables are never dropped, so
  // the count is bounded whatever RoPE parameters reach the op.
  static constexpr size_t kMaxRopes = 8;

 private:
  std::vector<float> inv_freq_;
  int64_t half_ = 0;
  int64_t positions_ = 0;
  std::vector<float> cos_, sin_;  // [positions, d/2]
};

}  // namespace framezip::engine::ops
