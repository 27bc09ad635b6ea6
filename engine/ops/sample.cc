#include "engine/ops/sample.h"

#include <cmath>

#include "engine/ops/cpu_backends.h"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/op_checks.h"

namespace framezip::engine::ops {
namespace {

Status CheckRow(size_t b, const RowSampling& r) {
  if (!r.greedy && !(r.temperature > 0 && std::isfinite(r.temperature))) {
    return InvalidArgumentError("SampleTokens: row {}: temperature must be > 0, got {}", b,
                                r.temperature);
  }
  if (r.top_k < 0) return InvalidArgumentError("SampleTokens: row {}: top_k {} < 0", b, r.top_k);
  if (!(r.top_p > 0 && r.top_p <= 1)) {
    return InvalidArgumentError("SampleTokens: row {}: top_p must be in (0, 1], got {}", b,
                                r.top_p);
  }
  if (!(r.repetition_penalty > 0 && std::isfinite(r.repetition_penalty))) {
    return InvalidArgumentError("SampleTokens: row {}: repetition_penalty must be > 0, got {}", b,
                                r.repetition_penalty);
  }
  if (!r.greedy && !(r.uniform >= 0 && r.uniform < 1)) {
    return InvalidArgumentError("SampleTokens: row {}: uniform must be in [0, 1), got {}", b,
                                r.uniform);
  }
  return absl::OkStatus();
}

}  // namespace

Status SampleTokens(Tensor& logits, std::span<const RowSampling> rows, std::span<int32_t> tokens) {
  constexpr std::string_view kOp = "SampleTokens";
  FZ_RETURN_IF_ERROR(CheckDefined(kOp, "logits", logits));
  FZ_RETURN_IF_ERROR(CheckDType(kOp, "logits", logits, DType::kF32));
  FZ_RETURN_IF_ERROR(CheckRank(kOp, "logits", logits, 2));
  const int64_t b = logits.dim(0);
  if (static_cast<int64_t>(rows.size()) != b || static_cast<int64_t>(tokens.size()) != b) {
    return InvalidArgumentError("SampleTokens: logits have {} rows, {} row params, {} outputs", b,
                                rows.size(), tokens.size());
  }
  if (logits.dim(1) < 1 || logits.dim(1) > (int64_t{1} << 30)) {
    return InvalidArgumentError("SampleTokens: vocabulary of {} logits", logits.dim(1));
  }
  for (size_t i = 0; i < rows.size(); ++i) FZ_RETURN_IF_ERROR(CheckRow(i, rows[i]));
  if (b == 0) return absl::OkStatus();
  if (!logits.device().is_cpu()) {
    FZ_RETURN_IF_ERROR(CheckDeviceUsable(logits.device()));
    return SampleTokensCuda(logits, rows, tokens);
  }
  return SampleTokensCpu(logits, rows, tokens);
}

}  // namespace framezip::engine::ops
