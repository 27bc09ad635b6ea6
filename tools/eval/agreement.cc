#include "tools/eval/agreement.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace framezip::eval {
namespace {

int64_t Argmax(std::span<const float> row) {
  return std::max_element(row.begin(), row.end()) - row.begin();  // first of equal maxima
}

// log-softmax of `row` in double.
void LogSoftmax(std::span<const float> row, std::vector<double>& out) {
  out.resize(row.size());
  const double max = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (size_t i = 0; i < row.size(); ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  const double log_z = max + std::log(sum);
  for (size_t i = 0; i < row.size(); ++i) out[i] = static_cast<double>(row[i]) - log_z;
}

}  // namespace

StatusOr<AgreementCounts> CompareNextTokenLogits(std::span<const float> reference,
                                                 std::span<const float> candidate, int64_t vocab) {
  if (vocab <= 0 || reference.size() != candidate.size() ||
      reference.size() % static_cast<size_t>(vocab) != 0) {
    return InvalidArgumentError(
        "agreement: logits of {} and {} values do not form rows of the vocabulary size {}",
        reference.size(), candidate.size(), vocab);
  }
  AgreementCounts counts;
  std::vector<double> log_p, log_q;
  const size_t v = static_cast<size_t>(vocab);
  for (size_t at = 0; at < reference.size(); at += v) {
    const auto p_row = reference.subspan(at, v), q_row = candidate.subspan(at, v);
    ++counts.positions;
    if (Argmax(p_row) == Argmax(q_row)) ++counts.matches;
    LogSoftmax(p_row, log_p);
    LogSoftmax(q_row, log_q);
    double kl = 0;
    for (size_t i = 0; i < v; ++i) kl += std::exp(log_p[i]) * (log_p[i] - log_q[i]);
    counts.kl_sum += std::max(kl, 0.0);  // rounding can leave -1e-17 for equal rows
  }
  return counts;
}

}  // namespace framezip::eval
