// The CPU sampler: HF generate's logits processors and warpers in their order (llm/sampler.h).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "engine/ops/cpu_backends.h"
#include "engine/ops/sample.h"

namespace framezip::engine::ops {

int32_t SampleRowCpu(std::span<float> logits, const RowSampling& row) {
  const int64_t v = static_cast<int64_t>(logits.size());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (row.repetition_penalty != 1.0f) {
    for (int32_t t : row.penalized) {
      if (t < 0 || t >= v) continue;
      float& s = logits[t];
      s = s < 0 ? s * row.repetition_penalty : s / row.repetition_penalty;
    }
  }
  if (row.greedy) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  if (row.temperature != 1.0f) {
    for (float& s : logits) s /= row.temperature;
  }
  if (row.top_k > 0 && row.top_k < v) {
    std::vector<float> copy(logits.begin(), logits.end());
    std::nth_element(copy.begin(), copy.begin() + (row.top_k - 1), copy.end(),
                     std::greater<float>());
    const float kth = copy[row.top_k - 1];
    for (float& s : logits)
      if (s < kth) s = kNegInf;
  }
  const float max = *std::max_element(logits.begin(), logits.end());
  if (row.top_p < 1.0f) {
    std::vector<int32_t> order(static_cast<size_t>(v));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return logits[a] < logits[b]; });
    double total = 0;
    for (float s : logits) total += std::exp(static_cast<double>(s) - max);
    double cum = 0;
    // Ascending: remove while cumulative probability <= 1 - top_p; keep the last (the max).
    for (int64_t i = 0; i + 1 < v; ++i) {
      cum += std::exp(static_cast<double>(logits[order[i]]) - max) / total;
      if (cum <= 1.0 - row.top_p) {
        logits[order[i]] = kNegInf;
      } else {
        break;
      }
    }
  }
  double total = 0;
  for (float s : logits) total += std::exp(static_cast<double>(s) - max);
  double r = row.uniform * total;
  int32_t last_ok = 0;
  for (int64_t i = 0; i < v; ++i) {
    if (logits[i] == kNegInf) continue;
    last_ok = static_cast<int32_t>(i);
    r -= std::exp(static_cast<double>(logits[i]) - max);
    if (r < 0) return static_cast<int32_t>(i);
  }
  return last_ok;  // rounding at the very end of the range
}

Status SampleTokensCpu(Tensor& logits, std::span<const RowSampling> rows,
                       std::span<int32_t> tokens) {
  const int64_t v = logits.dim(1);
  for (size_t b = 0; b < rows.size(); ++b) {
    tokens[b] = SampleRowCpu(std::span<float>(logits.data<float>() + b * v, v), rows[b]);
  }
  return absl::OkStatus();
}

}  // namespace framezip::engine::ops
