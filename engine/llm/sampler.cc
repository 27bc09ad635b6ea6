#include "engine/llm/sampler.h"

#include <algorithm>
#include <limits>
#include <random>
#include <unordered_set>

#include "engine/ops/sample.h"

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
  return ops::SampleRowCpu(logits, NextRow(history));
}

ops::RowSampling Sampler::NextRow(std::span<const int32_t> history) {
  ops::RowSampling row;
  row.greedy = !params_.do_sample;
  row.temperature = params_.temperature;
  row.top_k = params_.top_k;
  row.top_p = params_.top_p;
  row.repetition_penalty = params_.repetition_penalty;
  if (params_.repetition_penalty != 1.0f) {
    // HF gathers the scores of the history tokens, penalises each once (duplicates collapse).
    std::unordered_set<int32_t> seen;
    for (int32_t t : history) {
      if (seen.insert(t).second) row.penalized.push_back(t);
    }
  }
  // One draw per sampled token, as uniform_real_distribution<double>(0, total) takes it.
  if (params_.do_sample) {
    row.uniform = std::generate_canonical<double, std::numeric_limits<double>::digits>(rng_);
  }
  return row;
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

size_t StopCondition::HeldBackBytes(const std::string& text) const {
  size_t held = 0;
  for (const std::string& s : params_.stop_strings) {
    // A whole stop string is never held back: Check ends the turn on it.
    for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), text.size()); n > held; --n) {
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        held = n;
        break;
      }
    }
  }
  return held;
}

}  // namespace framezip::engine::llm
