// The loop both load-time weight quantisers share (quantize_int8.h, quantize_fp8.h): each row j of
// w [N, K] (f32, bf16 or f16, on the CPU) gets scale[j] = max_k |w[j][k]| / code_max (0 for a zero
// row) and codes encode(w[j][k] · (code_max / max_k |w[j][k]|)), rows in parallel on
// ComputePool(). Internal to engine/ops.
#pragma once

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/ops/cpu_kernels.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {

// Code: the stored element type (int8_t, Float8E4M3) of dtype `code_dtype`; encode(float) -> Code.
// Returns {codes [N, K], scales [N] f32}, both owning, on the CPU; INVALID_ARGUMENT naming `op`
// for another rank, dtype or device.
template <class Code, class Encode>
StatusOr<std::pair<Tensor, Tensor>> QuantizePerChannel(std::string_view op, const Tensor& w,
                                                       DType code_dtype, float code_max,
                                                       Encode encode) {
  FZ_RETURN_IF_ERROR(CheckDefined(op, "w", w));
  FZ_RETURN_IF_ERROR(CheckFloat(op, "w", w));
  FZ_RETURN_IF_ERROR(CheckRank(op, "w", w, 2));
  if (!w.device().is_cpu()) {
    return InvalidArgumentError("{}: w must be on the CPU (quantise at load)", op);
  }
  const int64_t n = w.dim(0), k = w.dim(1);
  FZ_ASSIGN_OR_RETURN(Tensor q, Tensor::Empty({n, k}, code_dtype));
  FZ_ASSIGN_OR_RETURN(Tensor scale, Tensor::Empty({n}, DType::kF32));
  const char* src = static_cast<const char*>(w.raw_data());
  const size_t elem = DTypeSize(w.dtype());
  Code* qp = static_cast<Code*>(q.raw_data());
  float* sp = scale.data<float>();
  ComputePool().ParallelFor(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(k, 1)),
                            [&](int64_t j0, int64_t j1) {
                              std::vector<float> row(static_cast<size_t>(k));
                              for (int64_t j = j0; j < j1; ++j) {
                                cpu::ToF32(src + j * k * elem, w.dtype(), k, row.data());
                                float max = 0;
                                for (float v : row) max = std::max(max, std::fabs(v));
                                const float inv = max > 0 ? code_max / max : 0.f;
                                sp[j] = max / code_max;
                                for (int64_t i = 0; i < k; ++i) {
                                  qp[j * k + i] = encode(row[static_cast<size_t>(i)] * inv);
                                }
                              }
                            });
  return std::pair{std::move(q), std::move(scale)};
}

}  // namespace framezip::engine::ops
