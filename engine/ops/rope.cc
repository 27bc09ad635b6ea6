#include "engine/ops/rope.h"

#include <cmath>
#include <numbers>

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

std::vector<float> RopeInverseFrequencies(const RopeParams& params) {
  const int half = params.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    // HF: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=int64).float() / dim)), all in f32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(params.head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(params.theta), exponent);
  }
  if (params.llama3_factor > 0) {
    // _compute_llama3_parameters: scale low frequencies, keep high ones, blend the band between.
    const double factor = params.llama3_factor, lo = params.llama3_low_freq_factor,
                 hi = params.llama3_high_freq_factor, orig = params.llama3_original_max_positions;
    const double low_wavelen = orig / lo, high_wavelen = orig / hi;
    for (float& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / factor);
      } else if (wavelen >= high_wavelen) {
        const double s = (orig / wavelen - lo) / (hi - lo);
        f = static_cast<float>((1 - s) * f / factor + s * f);
      }
    }
  }
  return inv;
}

Status ApplyRope(Tensor& x, const Tensor& positions, const RopeParams& params) {
  return ApplyRope(x, positions, params, {});
}

Status ApplyRope(Tensor& x, const Tensor& positions, const RopeParams& params,
                 std::span<const int32_t> host_positions) {
  constexpr std::string_view kOp = "ApplyRope";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "x", x));
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "positions", positions));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "x", x, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "x", x, 3));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "positions", positions, DType::kI32));
  if (params.head_dim <= 0 || params.head_dim % 2 != 0 || x.dim(2) != params.head_dim) {
    return InvalidArgumentError("ApplyRope: x has shape {} but head_dim is {} (must be even)",
                                ShapeString(x.shape()), params.head_dim);
  }
  if (positions.shape() != Shape{x.dim(0)}) {
    return InvalidArgumentError("ApplyRope: positions has shape {}, want [{}]",
                                ShapeString(positions.shape()), x.dim(0));
  }
  if (!host_positions.empty() && static_cast<int64_t>(host_positions.size()) != x.dim(0)) {
    return InvalidArgumentError("ApplyRope: {} host positions for {} tokens",
                                host_positions.size(), x.dim(0));
  }
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, x.device(), {&positions}));
  if (x.device().is_cpu() && host_positions.empty()) {
    host_positions = std::span<const int32_t>(positions.data<int32_t>(), x.dim(0));
  }
  for (size_t t = 0; t < host_positions.size(); ++t) {
    if (host_positions[t] < 0) {
      return InvalidArgumentError("ApplyRope: position {} of token {}", host_positions[t], t);
    }
  }
  if (!x.device().is_cpu()) {
    FZ_RETURN_IF_ERROR(CheckDeviceUsable(x.device()));
    // Without host positions the backend copies them back to check them.
    return ApplyRopeCuda(x, positions, params, !host_positions.empty());
  }
  return ApplyRopeCpu(x, positions, params);
}

}  // namespace framezip::engine::ops
