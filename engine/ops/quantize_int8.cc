#include "engine/ops/quantize_int8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

StatusOr<Int8Weight> QuantizeWeightInt8(const Tensor& w) {
  constexpr std::string_view kOp = "QuantizeWeightInt8";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "w", w));
  FZ_RETURN_IF_ERROR(CheckFloat(kOp, "w", w));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "w", w, 2));
  if (!w.device().is_cpu()) {
    return InvalidArgumentError("QuantizeWeightInt8: w must be on the CPU (quantise at load)");
  }
  const int64_t n = w.dim(0), k = w.dim(1);
  FZ_ASSIGN_OR_RETURN(Tensor q, Tensor::Empty({n, k}, DType::kI8));
  FZ_ASSIGN_OR_RETURN(Tensor scale, Tensor::Empty({n}, DType::kF32));
  const char* src = static_cast<const char*>(w.raw_data());
  const size_t elem = DTypeSize(w.dtype());
  int8_t* qp = q.data<int8_t>();
  float* sp = scale.data<float>();
  ComputePool().ParallelFor(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(k, 1)),
                            [&](int64_t j0, int64_t j1) {
                              std::vector<float> row(static_cast<size_t>(k));
                              for (int64_t j = j0; j < j1; ++j) {
                                cpu::ToF32(src + j * k * elem, w.dtype(), k, row.data());
                                float max = 0;
                                for (float v : row) max = std::max(max, std::fabs(v));
                                const float inv = max > 0 ? 127.f / max : 0.f;
                                sp[j] = max / 127.f;
                                for (int64_t i = 0; i < k; ++i) {
                                  const float r = std::nearbyint(row[static_cast<size_t>(i)] * inv);
                                  qp[j * k + i] = static_cast<int8_t>(std::clamp(r, -127.f, 127.f));
                                }
                              }
                            });
  return Int8Weight{std::move(q), std::move(scale)};
}

}  // namespace framezip::engine::ops
