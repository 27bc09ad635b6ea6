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

namespace {

// Negative positions refused from the host copy: the caller's, or on the CPU the tensor itself.
Status CheckPositions(std::string_view op, const Tensor& positions, int64_t tokens,
                      std::span<const int32_t>& host_positions) {
  if (positions.shape() != Shape{tokens}) {
    return InvalidArgumentError("{}: positions has shape {}, want [{}]", op,
                                ShapeString(positions.shape()), tokens);
  }
  if (!host_positions.empty() && static_cast<int64_t>(host_positions.size()) != tokens) {
    return InvalidArgumentError("{}: {} host positions for {} tokens", op, host_positions.size(),
                                tokens);
  }
  if (positions.device().is_cpu() && host_positions.empty()) {
    host_positions = std::span<const int32_t>(positions.data<int32_t>(), tokens);
  }
  for (size_t t = 0; t < host_positions.size(); ++t) {
    if (host_positions[t] < 0) {
      return InvalidArgumentError("{}: position {} of token {}", op, host_positions[t], t);
    }
  }
  return absl::OkStatus();
}

}  // namespace

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
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, x.device(), {&positions}));
  FZ_RETURN_IF_ERROR(CheckPositions(kOp, positions, x.dim(0), host_positions));
  if (!x.device().is_cpu()) {
    FZ_RETURN_IF_ERROR(CheckDeviceUsable(x.device()));
    // Without host positions the backend copies them back to check them.
    return ApplyRopeCuda(x, positions, params, !host_positions.empty());
  }
  return ApplyRopeCpu(x, positions, params);
}

Status RopeSplitQkv(const Tensor& qkv, const Tensor& positions, const RopeParams& params,
                    std::span<const int32_t> host_positions, Tensor& q, Tensor& k, Tensor& v) {
  constexpr std::string_view kOp = "RopeSplitQkv";
  for (const auto& [t, name] :
       {std::pair{&qkv, "qkv"}, {&positions, "positions"}, {&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    FZ_RETURN_IF_ERROR(CheckDefined(kOp, name, *t));
  }
  for (const auto& [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    FZ_RETURN_IF_ERROR(CheckDType(kOp, name, *t, DType::kF32));
    FZ_RETURN_IF_ERROR(CheckRank(kOp, name, *t, 3));
  }
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "qkv", qkv, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "qkv", qkv, 2));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "positions", positions, DType::kI32));
  const int64_t tokens = qkv.dim(0), d = params.head_dim;
  if (d <= 0 || d % 2 != 0 || q.dim(2) != d) {
    return InvalidArgumentError("RopeSplitQkv: q has shape {} but head_dim is {} (must be even)",
                                ShapeString(q.shape()), d);
  }
  const int64_t q_heads = q.dim(1), kv_heads = k.dim(1);
  if (q.dim(0) != tokens || k.shape() != Shape{tokens, kv_heads, d} || v.shape() != k.shape() ||
      qkv.dim(1) != (q_heads + 2 * kv_heads) * d) {
    return InvalidArgumentError(
        "RopeSplitQkv: qkv {} does not split into q {}, k {} and v {} (want [T, (Hq + 2·Hkv)·d] "
        "and k, v alike)",
        ShapeString(qkv.shape()), ShapeString(q.shape()), ShapeString(k.shape()),
        ShapeString(v.shape()));
  }
  FZ_RETURN_IF_ERROR(CheckOnDevice(kOp, qkv.device(), {&positions, &q, &k, &v}));
  FZ_RETURN_IF_ERROR(CheckPositions(kOp, positions, tokens, host_positions));
  if (!qkv.device().is_cpu()) {
    FZ_RETURN_IF_ERROR(CheckDeviceUsable(qkv.device()));
    return RopeSplitQkvCuda(qkv, positions, params, !host_positions.empty(), q, k, v);
  }
  return RopeSplitQkvCpu(qkv, positions, params, q, k, v);
}

}  // namespace framezip::engine::ops
