#include "engine/llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_set>

namespace framezip::engine::llm {

Status ValidateSamplingParams(const SamplingParams& p) {
  if (p.do_sample && !(p.temperature > 0)) {
    return InvalidArgumentError("temperature must be > 0 when sampling, got {}", p.temperature);
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return InvalidArgumentError("top_p must be in (0, 1], got {}", p.top_p);
  }
  if (p.top_k < 0) return InvalidArgumentError("top_k must be >= 0, got {}", p.top_k);
  if (!(p.repetition_penalty > 0)) {
    return InvalidArgumentError("repetition_penalty must be > 0, got {}", p.repetition_penalty);
  }
  if (p.max_new_tokens < 1) {
    return InvalidArgumentError("max_new_tokens must be >= 1, got {}", p.max_new_tokens);
  }
  return absl::OkStatus();
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> history) {
  const int64_t v = static_cast<int64_t>(logits.size());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (params_.repetition_penalty != 1.0f) {
    // HF gathers the scores of the history tokens, penalises each once (duplicates collapse).
    std::unordered_set<int32_t> seen;
    for (int32_t t : history) {
      if (t < 0 || t >= v || !seen.insert(t).second) continue;
      float& s = logits[t];
      s = s < 0 ? s * params_.repetition_penalty : s / params_.repetition_penalty;
    }
  }
  if (!params_.do_sample) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  if (params_.temperature != 1.0f) {
    for (float& s : logits) s /= params_.temperature;
  }
  if (params_.top_k > 0 && params_.top_k < v) {
    std::vector<float> copy(logits.begin(), logits.end());
    std::nth_element(copy.begin(), copy.begin() + (params_.top_k - 1), copy.end(),
                     std::greater<float>());
    const float kth = copy[params_.top_k - 1];
    for (float& s : logits)
      if (s < kth) s = kNegInf;
  }
  const float max = *std::max_element(logits.begin(), logits.end());
  if (params_.top_p < 1.0f) {
    order_.resize(static_cast<size_t>(v));
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(),
                     [&](int32_t a, int32_t b) { return logits[a] < logits[b]; });
    double total = 0;
    for (float s : logits) total += std::exp(static_cast<double>(s) - max);
    double cum = 0;
    // Ascending: remove while cumulative probability <= 1 - top_p; keep the last (the max).
    for (int64_t i = 0; i + 1 < v; ++i) {
      cum += std::exp(static_cast<double>(logits[order_[i]]) - max) / total;
      if (cum <= 1.0 - params_.top_p) {
        logits[order_[i]] = kNegInf;
      } else {
        break;
      }
    }
  }
  double total = 0;
  for (float s : logits) total += std::exp(static_cast<double>(s) - max);
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  int32_t last_ok = 0;
  for (int64_t i = 0; i < v; ++i) {
    if (logits[i] == kNegInf) continue;
    last_ok = static_cast<int32_t>(i);
    r -= std::exp(static_cast<double>(logits[i]) - max);
    if (r < 0) return static_cast<int32_t>(i);
  }
  return last_ok;  // rounding at the very end of the range
}

std::string_view StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kNone:
      return "none";
    case StopReason::kStopToken:
      return "stop_token";
    case StopReason::kStopString:
      return "stop_string";
    case StopReason::kMaxTokens:
      return "max_tokens";
    case StopReason::kCancelled:
      return "cancelled";
  }
  return "?";
}

StopReason StopCondition::Check(int32_t token, int generated_tokens,
                                const std::string& generated_text, size_t* text_end) const {
  if (std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(), token) !=
      params_.stop_token_ids.end()) {
    return StopReason::kStopToken;
  }
  for (const std::string& s : params_.stop_strings) {
    if (s.empty()) continue;
    const size_t at = generated_text.find(s);
    if (at != std::string::npos) {
      if (text_end != nullptr) *text_end = at;
      return StopReason::kStopString;
    }
  }
  if (generated_tokens >= params_.max_new_tokens) return StopReason::kMaxTokens;
  return StopReason::kNone;
}

}  // namespace framezip::engine::llm
