#include "engine/ops/sample.h"

#include <algorithm>
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

PackedSampling PackSampling(std::span<const RowSampling> rows) {
  PackedSampling out;
  out.rows.resize(rows.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    const RowSampling& r = rows[b];
    SampleRowParams& p = out.rows[b];
    p.greedy = r.greedy ? 1 : 0;
    p.top_k = r.top_k;
    p.temperature = r.temperature;
    p.top_p = r.top_p;
    p.repetition_penalty = r.repetition_penalty;
    p.uniform = r.uniform;
    p.penalized_begin = static_cast<int>(out.penalized.size());
    if (r.repetition_penalty != 1.0f) {
      out.penalized.insert(out.penalized.end(), r.penalized.begin(), r.penalized.end());
    }
    p.penalized_end = static_cast<int>(out.penalized.size());
  }
  return out;
}

namespace {

// SampleTokens' checks of its arguments.
Status CheckSampleArguments(const Tensor& logits, std::span<const RowSampling> rows,
                            std::span<int32_t> tokens) {
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
  if (!logits.device().is_cpu() && b > 0) FZ_RETURN_IF_ERROR(CheckDeviceUsable(logits.device()));
  return absl::OkStatus();
}

}  // namespace

Status SampleTokens(Tensor& logits, std::span<const RowSampling> rows, std::span<int32_t> tokens) {
  FZ_RETURN_IF_ERROR(CheckSampleArguments(logits, rows, tokens));
  if (rows.empty()) return absl::OkStatus();
  if (!logits.device().is_cpu()) return SampleTokensCuda(logits, rows, tokens);
  return SampleTokensCpu(logits, rows, tokens);
}

Status SampleTokensPlanned(Tensor& logits, std::span<const RowSampling> rows,
                           const PlannedSampling& planned, std::span<int32_t> tokens) {
  FZ_RETURN_IF_ERROR(CheckSampleArguments(logits, rows, tokens));
  if (rows.empty()) return absl::OkStatus();
  if (planned.rows == nullptr || planned.tokens == nullptr) {
    return InvalidArgumentError("SampleTokensPlanned: the plan holds no sampling parameters");
  }
  if (!logits.device().is_cpu()) return SampleTokensPlannedCuda(logits, planned, tokens);
  // The CPU samples from the plan's packed copy too, as a GPU does, so the CPU's tests read back
  // what the plan laid out (`rows` was checked above; the copy must hold the same values).
  std::vector<RowSampling> unpacked(rows.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    const SampleRowParams& p = planned.rows[b];
    RowSampling& r = unpacked[b];
    r.greedy = p.greedy != 0;
    r.top_k = p.top_k;
    r.temperature = p.temperature;
    r.top_p = p.top_p;
    r.repetition_penalty = p.repetition_penalty;
    r.uniform = p.uniform;
    r.penalized.assign(planned.penalized + p.penalized_begin, planned.penalized + p.penalized_end);
  }
  FZ_RETURN_IF_ERROR(SampleTokensCpu(logits, unpacked, tokens));
  std::copy(tokens.begin(), tokens.end(), planned.tokens);  // where a GPU's kernel writes them
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
